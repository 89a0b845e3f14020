#!/usr/bin/env bash
# Checks oclvm as an embedder meets it (design/embedding.md), from an INSTALLED tree only:
#   1. the quickstart quoted in design/embedding.md is examples/quickstart/main.cc, to the letter;
#   2. `cmake --install BUILD --prefix BUILD/package/prefix` (a fresh prefix every time);
#   3. the installed headers name only oclvm/ headers, no OpenCL header and no private folder,
#      and none includes a layer above its own;
#   4. three separate CMake projects, configured against that prefix alone with
#      find_package(oclvm), are built and their tests run: tests/package (every header on its
#      own, the targets, the version), examples/quickstart, examples/eager_tensor (its
#      GoogleTest suite and demo on one device and on two); the first and the last again with
#      clang++-15 when it is there.
# Usage: scripts/check_package.sh [BUILD_DIR]   (default: build; it must be built already)
# Exit status non-zero at the first failure, with what failed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
case $build in /*) ;; *) build="$PWD/$build" ;; esac
out="$build/package"
prefix="$out/prefix"
version=$(sed -n 's/^project(oclvm VERSION \([0-9.]*\) .*/\1/p' CMakeLists.txt)
jobs=$(nproc)

say() { printf '== check_package: %s\n' "$*"; }
fail() { printf '== check_package: FAILED: %s\n' "$*" >&2; exit 1; }

say "design/embedding.md quotes examples/quickstart/main.cc exactly"
quoted=$(awk '/^<!-- quickstart: examples\/quickstart\/main.cc -->$/ {found = 1; next}
              found == 1 && /^```cpp$/ {found = 2; next}
              found == 2 && /^```$/ {exit}
              found == 2 {print}' design/embedding.md)
[ -n "$quoted" ] || fail "no quickstart block after the marker in design/embedding.md"
diff -u --label design/embedding.md --label examples/quickstart/main.cc \
  <(printf '%s\n' "$quoted") examples/quickstart/main.cc ||
  fail "design/embedding.md and examples/quickstart/main.cc differ (diff above): make them one"

say "install $build (oclvm $version) into $prefix"
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
[ -x "$prefix/bin/oclvm" ] || fail "no bin/oclvm in the prefix"
[ "$("$prefix/bin/oclvm" --version)" = "oclvm $version" ] ||
  fail "installed 'oclvm --version' says '$("$prefix/bin/oclvm" --version)', not 'oclvm $version'"

say "installed headers: only oclvm/ includes, no OpenCL, nothing private"
private=$(find "$prefix/include/oclvm" -path "$prefix/include/oclvm/storage/opencl*" \
          -o -path "$prefix/include/oclvm/storage/host*" -o -name 'address_space.h' \
          -o -name '*_allocator.h' ! -name 'allocator.h')
[ -z "$private" ] || fail "private headers were installed: $private"
cl=$(grep -rlE '#include [<"](CL/|opencl\.h)' "$prefix/include" || true)
[ -z "$cl" ] || fail "installed headers include OpenCL: $cl"
foreign=$(grep -rhE '^#include "' "$prefix/include" | grep -v '^#include "oclvm/' || true)
[ -z "$foreign" ] || fail "installed headers include non-oclvm headers with quotes: $foreign"
# The project's layering (design/architecture.md) holds in what is installed: storage/ <- vm/ <- instructions/.
upward=$(grep -lE '^#include "oclvm/(vm|instructions)/' "$prefix"/include/oclvm/storage/*.h || true;
         grep -lE '^#include "oclvm/instructions/' "$prefix"/include/oclvm/vm/*.h || true)
[ -z "$upward" ] || fail "installed headers include a layer above their own: $upward"

# configure_build_test NAME SOURCE [CMAKE ARGS...]: a separate project against the prefix only.
configure_build_test() {
  local name=$1 source=$2
  shift 2
  local dir="$out/$name"
  say "$name: configure $source against $prefix, build, test"
  rm -rf "$dir"
  cmake -S "$source" -B "$dir" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; fail "$name: configure"; }
  grep -q "oclvm_DIR:PATH=$prefix/" "$dir/CMakeCache.txt" ||
    fail "$name: oclvm was not found in $prefix ($(grep oclvm_DIR "$dir/CMakeCache.txt"))"
  cmake --build "$dir" -j "$jobs" >"$dir.build.log" 2>&1 ||
    { cat "$dir.build.log"; fail "$name: build"; }
  (cd "$dir" && ctest --output-on-failure) || fail "$name: tests"
}

configure_build_test package tests/package \
  -DOCLVM_EXPECTED_VERSION="$version" -DOCLVM_EXPECTED_PREFIX="$prefix"
configure_build_test quickstart examples/quickstart
say "quickstart output:"
"$out/quickstart/quickstart" || fail "quickstart exited with $?"
configure_build_test eager_tensor examples/eager_tensor -DOCLVM_WERROR=ON
say "eager_tensor_demo on two devices:"
POCL_DEVICES="basic basic" "$out/eager_tensor/eager_tensor_demo" | tee "$out/demo.out" ||
  fail "eager_tensor_demo exited with ${PIPESTATUS[0]}"
grep -q "^using opencl:0 and opencl:1$" "$out/demo.out" ||
  fail "eager_tensor_demo did not use two OpenCL devices with POCL_DEVICES=\"basic basic\""
# The headers and the example with the other compiler an embedder may use (the package's
# libraries stay g++'s; both use libstdc++). clang-15 is installed by scripts/setup.sh.
if command -v clang++-15 >/dev/null; then
  configure_build_test package.clang tests/package -DCMAKE_CXX_COMPILER=clang++-15 \
    -DOCLVM_EXPECTED_VERSION="$version" -DOCLVM_EXPECTED_PREFIX="$prefix"
  configure_build_test eager_tensor.clang examples/eager_tensor -DCMAKE_CXX_COMPILER=clang++-15 \
    -DOCLVM_WERROR=ON
else
  say "clang++-15 not found: the clang builds are skipped"
fi
say "passed: the installed package, its headers, the quickstart and the eager tensor example"
