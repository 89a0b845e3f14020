// fuzz/fuzz_check.h — what the fuzz targets count as a finding, shared by both targets.
//
// A fuzz target (fuzz/*_fuzzer.cc) hands one input to a parser. The parser's own typed error
// (ScriptError, TraceError) is the expected answer to a malformed input; everything else is a
// finding and ends the process with abort(), which libFuzzer reports as a crash and saves the input
// for (build-fuzz/artifacts/), and which fails the ctest replay (fuzz/replay_main.cc):
//   - OCLVM_FUZZ_CHECK(cond): an invariant the parsed result promises does not hold;
//   - unexpected_exception(): the parser threw something other than its typed error.
// Crashes, sanitizer reports, hangs and memory without bound are libFuzzer's to detect.
//
// Unlike OCLVM_DCHECK, these checks are compiled in every build: they are the fuzzers' oracle.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace oclvm::fuzz {

[[noreturn]] inline void finding(const char* what, const char* detail, const char* file,
                                 int line) {
  std::fprintf(stderr, "%s:%d: fuzz finding: %s%s%s\n", file, line, what, detail[0] ? ": " : "",
               detail);
  std::abort();
}

// Call from a catch (...) block after the expected error type's handler; `what` says which call
// threw and what it should have thrown instead. Reports the exception's what() and aborts.
[[noreturn]] inline void unexpected_exception(const char* what, const char* file, int line) {
  try {
    throw;
  } catch (const std::exception& e) {
    finding(what, e.what(), file, line);
  } catch (...) {
    finding(what, "an exception that is not a std::exception", file, line);
  }
}

}  // namespace oclvm::fuzz

#define OCLVM_FUZZ_CHECK(cond)                                                              \
  do {                                                                                      \
    if (!(cond)) ::oclvm::fuzz::finding("broken invariant", #cond, __FILE__, __LINE__);     \
  } while (0)
