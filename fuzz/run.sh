#!/usr/bin/env bash
# fuzz/run.sh — runs each libFuzzer target of a fuzz build for a while; `make fuzz` calls it.
#
#   fuzz/run.sh BUILD_DIR SECONDS [MAX_LEN]
#
# For each parser (script, trace), one after the other:
#   - the stored regressions, fuzz/regressions/PARSER, once each under the sanitizers (ctest
#     replays them too, but built without sanitizers);
#   - a fresh scratch corpus BUILD_DIR/fuzz-corpus/PARSER, a copy of the seeds fuzz/corpus/PARSER
#     (libFuzzer adds the inputs it keeps there, never in the tree; the regressions are not seeds:
#     some are huge on purpose and would slow every mutation of them);
#   - BUILD_DIR/fuzz/PARSER_fuzzer on it for SECONDS with fuzz/PARSER.dict; every input is cut to
#     MAX_LEN bytes (default 4096), and may take at most 10 s and 2048 MB, else it is a finding;
#   - the summary: libFuzzer's "Done N runs in S second(s)", and its coverage at the start (seeds
#     only) and at the end.
# Exit status 0 when nothing was found. Otherwise 1: a new input is saved as
# BUILD_DIR/artifacts/PARSER-crash-* (or -timeout-*, -oom-*), the full report is in
# BUILD_DIR/fuzz-PARSER.log, and its end is printed. Once fixed, the input goes into
# fuzz/regressions/PARSER/, which `make test` replays (fuzz/README.md).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: fuzz/run.sh BUILD_DIR SECONDS [MAX_LEN]" >&2
  exit 2
fi
build=$1
seconds=$2
max_len=${3:-4096}
root=$(cd "$(dirname "$0")/.." && pwd)

symbolizer=/usr/lib/llvm-15/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
export UBSAN_OPTIONS=print_stacktrace=1

mkdir -p "$build/artifacts"
started="$build/artifacts/.started"  # artifacts newer than this are this run's
touch "$started"
status=0

# Runs the fuzzer with the given arguments into a log; on failure prints the log's end and notes
# the finding.
run_fuzzer() {
  local log=$1
  shift
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then
    status=1
    echo "  FINDING (exit status $rc); the end of $log:"
    tail -n 40 "$log" | sed 's/^/  | /'
  fi
  return 0
}

for parser in script trace; do
  fuzzer="$build/fuzz/${parser}_fuzzer"
  corpus="$build/fuzz-corpus/$parser"
  log="$build/fuzz-$parser.log"

  echo "=== ${parser}_fuzzer: the regressions in fuzz/regressions/$parser, once each"
  run_fuzzer "$build/fuzz-$parser-regressions.log" "$fuzzer" -runs=0 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/$parser-" "$root/fuzz/regressions/$parser"
  grep "^Done [0-9]* runs" "$build/fuzz-$parser-regressions.log" | sed 's/^/  /' || true

  rm -rf "$corpus"
  mkdir -p "$corpus"
  cp "$root/fuzz/corpus/$parser"/* "$corpus"/
  echo "=== ${parser}_fuzzer: ${seconds} s from $(ls "$corpus" | wc -l) seeds (log: $log)"
  run_fuzzer "$log" "$fuzzer" "$corpus" -max_total_time="$seconds" -max_len="$max_len" \
    -timeout=10 -rss_limit_mb=2048 -dict="$root/fuzz/$parser.dict" -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$parser-"
  grep -m1 "INITED" "$log" | sed 's/^/  seeds: /' || true
  grep "DONE" "$log" | tail -n 1 | sed 's/^/  end:   /' || true
  grep "^Done [0-9]* runs" "$log" | sed 's/^/  /' || true
done
if [ $status -ne 0 ]; then
  find "$build/artifacts" -type f -newer "$started" | sed 's/^/saved input: /'
fi
exit $status
