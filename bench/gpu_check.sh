#!/usr/bin/env bash
# bench/gpu_check.sh — runs oclvm's kernel tests, the eager tensor example and vm_bench's kernel
# and allocate/release benchmarks once on a borrowed NVIDIA GPU machine, where nothing can be
# installed and nothing built: everything it needs travels in .gpu/ at the repository root.
#
#   bash bench/gpu_check.sh pack [BUILD_DIR]   here: fills .gpu/ (ignored by git) with stripped
#                                              copies of BUILD_DIR's (default build) vm_bench,
#                                              oclvm, oclvm_instructions_tests, the eager tensor
#                                              example if built, and what a stock Ubuntu 24.04
#                                              lacks: clinfo, libbenchmark, CLBlast and the ocl-icd
#                                              loader from Debian's packages, this machine's
#                                              libstdc++ as a last resort; prints its size
#   bash bench/gpu_check.sh run                there (and here, against PoCL): probes the GPU,
#                                              the C library and every OpenCL library and ICD
#                                              file, registers NVIDIA's OpenCL library if no ICD
#                                              file names it, picks the NVIDIA platform if there
#                                              is one (else says so and runs on what there is),
#                                              runs each step under `timeout`, and ends with the
#                                              `ratio` lines of the benchmarks
#
# The run writes $OUT/gpu_check.log and $OUT/summary.txt (OUT defaults to /tmp/gpu_check_out).
# On the device machine: command "bash bench/gpu_check.sh run", carry [".gpu"], timeout_s 300.
# The whole run keeps to GPU_CHECK_BUDGET seconds (default 210): a step that would outlast it is
# cut short or skipped. A failing or missing step is reported and the run goes on; the exit
# status is 0 unless none of the oclvm steps succeeded.
#
# For testing here: GPU_CHECK_LOADER=carried|system forces the ICD loader; GPU_CHECK_EXTRA_DIRS
# (colon-separated) adds folders to the search for OpenCL libraries (a folder with a link named
# libnvidia-opencl.so.1 to PoCL's libpocl.so.2 walks the "no ICD file names it" path);
# GPU_CHECK_PLATFORM=Portable makes PoCL the wanted platform in NVIDIA's stead.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
GPU=$ROOT/.gpu
BINARIES=(vm_bench oclvm oclvm_instructions_tests)
WANTED=${GPU_CHECK_PLATFORM:-NVIDIA}  # the platform to run on, a substring of its name
EXAMPLES=(eager_tensor_demo eager_tensor_tests)

say() { printf '== gpu_check: %s\n' "$*"; }

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
}

# ---------------------------------------------------------------------------------------------
# pack (here)
# ---------------------------------------------------------------------------------------------

# Ignores .gpu/ in this checkout (the device tool carries it when asked to).
exclude_gpu_dir() {
  local exclude
  exclude="$(git rev-parse --git-path info/exclude 2>/dev/null)" || return 0
  mkdir -p "$(dirname "$exclude")"
  grep -qxF '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"
}

# strip_into SRC DEST_DIR: a stripped copy of SRC under DEST_DIR; none if strip fails (a binary
# being linked at that moment, say: pack again after the build).
strip_into() {
  strip --strip-all -o "$2/$(basename "$1")" "$1" ||
    { rm -f "$2/$(basename "$1")"; say "WARNING: could not strip $1: not packed"; }
}

# Copies the oclvm binaries of BUILD_DIR.
pack_binaries() {
  local build=$1 name
  for name in "${BINARIES[@]}"; do
    if [ -x "$build/$name" ]; then
      strip_into "$build/$name" "$GPU/bin"
    else
      say "WARNING: $build/$name is not built: it will not run there"
    fi
  done
}

# Copies the eager tensor example: from BUILD_DIR/package/eager_tensor (where `make package`,
# scripts/check_package.sh, builds it), else built in /tmp against BUILD_DIR/package/prefix.
pack_example() {
  local build=$1 dir="$1/package/eager_tensor" name
  if [ ! -x "$dir/eager_tensor_demo" ]; then
    local prefix="$build/package/prefix"
    if [ ! -d "$prefix/lib/cmake" ] && [ ! -d "$prefix/lib64/cmake" ]; then
      say "eager tensor example skipped: neither $dir nor an installed $prefix (run 'make package')"
      return 0
    fi
    dir=$(mktemp -d /tmp/gpu_check_eager.XXXXXX)
    say "building the eager tensor example in $dir against $prefix"
    if ! { cmake -S examples/eager_tensor -B "$dir" -DCMAKE_PREFIX_PATH="$prefix" \
             -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF &&
           cmake --build "$dir" -j "$(nproc)"; } >"$dir.log" 2>&1; then
      say "eager tensor example skipped: its build failed (see $dir.log)"
      return 0
    fi
  fi
  for name in "${EXAMPLES[@]}"; do
    [ -x "$dir/$name" ] && strip_into "$dir/$name" "$GPU/bin"
  done
}

# Debian's libbenchmark, CLBlast (the example's matmul), ocl-icd loader and clinfo, unpacked with
# dpkg -x beside .gpu/ (never /).
pack_debian_packages() {
  local debs="$GPU/.debs" tree="$GPU/.tree" deb
  mkdir -p "$debs" "$tree"
  if ! (cd "$debs" && timeout 120 apt-get download libbenchmark1debian libclblast1 ocl-icd-libopencl1 clinfo \
          2>&1 | grep -v '^W: Download is performed unsandboxed'); then
    say "WARNING: apt-get download failed"
  fi
  for deb in "$debs"/*.deb; do
    [ -f "$deb" ] && dpkg -x "$deb" "$tree"
  done
  copy_first "$GPU/lib" libbenchmark.so.1debian "$tree"
  copy_first "$GPU/lib" libclblast.so.1 "$tree"
  copy_first "$GPU/loader" libOpenCL.so.1 "$tree"
  [ -x "$tree/usr/bin/clinfo" ] && cp "$tree/usr/bin/clinfo" "$GPU/bin/"
  rm -rf "$debs" "$tree"
  [ -x "$GPU/bin/clinfo" ] || say "WARNING: no clinfo packed: the run lists devices with oclvm alone"
}

# copy_first DEST SONAME TREE: the library SONAME from TREE, else this machine's own (dereferenced).
copy_first() {
  local dest=$1 soname=$2 tree=$3 found
  found=$(find "$tree" -name "$soname" 2>/dev/null | head -1)
  if [ -z "$found" ]; then
    found=$(ldconfig -p | awk -v n="$soname" '$1 == n && /x86-64/ {print $NF; exit}')
    [ -n "$found" ] && say "no $soname from Debian's package: copying this machine's $found"
  fi
  if [ -n "$found" ]; then cp -L "$found" "$dest/$soname"; else say "WARNING: no $soname to pack"; fi
}

# libstdc++ and libgcc_s, used there only when that machine has none (Ubuntu 24.04's are newer).
pack_fallback_libraries() {
  local soname found
  for soname in libstdc++.so.6 libgcc_s.so.1; do
    found=$(ldconfig -p | awk -v n="$soname" '$1 == n && /x86-64/ {print $NF; exit}')
    [ -n "$found" ] && cp -L "$found" "$GPU/fallback/$soname"
  done
}

# Says which packed binary would miss a library with .gpu's folders on the library path.
check_packed_binaries() {
  local bin missing
  for bin in "$GPU"/bin/*; do
    missing=$(LD_LIBRARY_PATH="$GPU/lib:$GPU/loader" ldd "$bin" 2>&1 | grep 'not found')
    [ -z "$missing" ] || say "WARNING: $(basename "$bin") misses: $missing"
  done
}

# What the packed binaries were built from, and the newest C library versions they need.
write_manifest() {
  local build=$1
  {
    echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ) from $build"
    echo "git HEAD: $(git rev-parse --short HEAD 2>/dev/null) ($(git status --short 2>/dev/null |
      wc -l) changed paths in the work tree)"
    echo "needs: $(objdump -T "$GPU"/bin/* 2>/dev/null | grep -oE '(GLIBC|GLIBCXX)_[0-9.]+' |
      sort -uV | awk -F_ '{last[$1] = $0} END {print last["GLIBC"], last["GLIBCXX"]}')"
    (cd "$GPU" && find . -type f ! -name MANIFEST -printf '%8s %p\n' | sort -k2)
  } >"$GPU/MANIFEST"
}

pack() {
  local build=${1:-build}
  case $build in /*) ;; *) build="$ROOT/$build" ;; esac
  [ -d "$build" ] || { say "no build folder $build"; exit 1; }
  exclude_gpu_dir
  rm -rf "$GPU"
  mkdir -p "$GPU/bin" "$GPU/lib" "$GPU/loader" "$GPU/fallback"
  pack_binaries "$build"
  pack_example "$build"
  pack_debian_packages
  pack_fallback_libraries
  check_packed_binaries
  write_manifest "$build"
  cat "$GPU/MANIFEST"
  local bytes tree
  bytes=$(du -sb "$GPU" | cut -f1)
  tree=$(git ls-files -co --exclude-standard -z | du --files0-from=- -cb 2>/dev/null | tail -1 | cut -f1)
  say "$GPU: $((bytes / 1024)) KiB; with the work tree that travels: $(((bytes + tree) / 1048576)) MiB of 64"
  [ "$bytes" -lt $((60 * 1048576)) ] || { say "FAILED: .gpu is 60 MiB or more"; exit 1; }
  say "device run: command 'bash bench/gpu_check.sh run', carry [\".gpu\"], timeout_s 300"
}

# ---------------------------------------------------------------------------------------------
# run (there)
# ---------------------------------------------------------------------------------------------

START=$SECONDS
BUDGET=${GPU_CHECK_BUDGET:-210}
STEPS_OK=0
SUMMARY=()
OPENCL_HANGS=0
# Line-buffered output, so that a step killed at its timeout still leaves what it had printed.
LINES=()
command -v stdbuf >/dev/null && LINES=(stdbuf -oL -eL)

# step NAME SECONDS COMMAND...: runs COMMAND under timeout (cut to what is left of the budget),
# its output shown and kept in $WORK/NAME.out; records how it ended. Returns its exit status.
step() {
  local name=$1 limit=$2 left status
  shift 2
  left=$((BUDGET - (SECONDS - START)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 5 ]; then
    say "$name: SKIPPED, the ${BUDGET} s budget is spent"
    SUMMARY+=("$name: skipped (budget spent)")
    return 124
  fi
  local shown="$*"
  shown=${shown//$'\n'/ }
  [ "${#shown}" -le 200 ] || shown="${shown:0:200}..."
  say "$name (timeout ${limit} s): $shown"
  local began=$SECONDS
  timeout -k 5 "$limit" "${LINES[@]}" "$@" >"$WORK/$name.out" 2>&1 </dev/null
  status=$?
  sed -i 's/\x1b\[[0-9;]*m//g' "$WORK/$name.out"  # vm_bench's reporter colours whatever the flags
  cat "$WORK/$name.out"
  case $status in
    0) SUMMARY+=("$name: ok in $((SECONDS - began)) s") ;;
    124 | 137) SUMMARY+=("$name: TIMED OUT after ${limit} s") ;;
    *) SUMMARY+=("$name: FAILED with exit status $status in $((SECONDS - began)) s") ;;
  esac
  say "$name: ${SUMMARY[-1]#*: }"
  return "$status"
}

# oclvm_step NAME SECONDS COMMAND...: a step that counts towards "something ran", skipped when
# listing the devices already timed out (OpenCL hangs here: no point spending the budget).
oclvm_step() {
  if [ "$OPENCL_HANGS" = 1 ]; then
    say "$1: SKIPPED, listing the OpenCL devices timed out"
    SUMMARY+=("$1: skipped (OpenCL hangs)")
    return 124
  fi
  step "$@" && STEPS_OK=$((STEPS_OK + 1))
}

# timed_out NAME: whether step NAME ended at its timeout.
timed_out() {
  local line
  for line in "${SUMMARY[@]}"; do [[ $line == "$1: TIMED OUT"* ]] && return 0; done
  return 1
}

# bin NAME: the packed binary, else the one in build/, else nothing.
bin() {
  local name=$1
  if [ -x "$GPU/bin/$name" ]; then echo "$GPU/bin/$name"
  elif [ -x "$ROOT/build/$name" ]; then echo "$ROOT/build/$name"
  elif [ -x "$ROOT/build/package/eager_tensor/$name" ]; then echo "$ROOT/build/package/eager_tensor/$name"
  elif [ "$name" = clinfo ]; then command -v clinfo
  fi
}

# missing NAME: says a binary is missing and records it.
missing() {
  say "$1: SKIPPED, no such binary in .gpu/bin or build/"
  SUMMARY+=("$1: skipped (not packed)")
}

probe_machine() {
  say "machine"
  step nvidia-smi 20 nvidia-smi -L && SUMMARY+=("gpu: $(head -1 "$WORK/nvidia-smi.out")")
  step nvidia-smi-driver 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  uname -a
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>&1 | head -1)"
  [ -f "$GPU/MANIFEST" ] && sed -n '1,3p' "$GPU/MANIFEST"
}

# Every OpenCL library and ICD file on the machine, one path a line, into $WORK/opencl_files.
find_opencl_files() {
  local roots=(/usr/local/nvidia /usr/local/cuda /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu
               /usr/lib64 /usr/lib /etc/OpenCL /usr/local/lib /opt)
  local extra
  IFS=: read -ra extra <<<"${GPU_CHECK_EXTRA_DIRS:-}"
  roots+=("${extra[@]}" /usr/local/cuda-* "${OCL_ICD_VENDORS:-}")
  local existing=() root
  for root in "${roots[@]}"; do [ -e "$root" ] && existing+=("$root"); done
  timeout 30 find -L "${existing[@]}" -maxdepth 5 \
    \( -name 'libnvidia-opencl*' -o -name 'libOpenCL.so*' -o -name '*.icd' \) \
    \( -type f -o -type l \) 2>/dev/null | sort -u >"$WORK/opencl_files"
}

probe_opencl() {
  say "OpenCL libraries and ICD files"
  find_opencl_files
  sed 's/^/  /' "$WORK/opencl_files"
  [ -s "$WORK/opencl_files" ] || echo "  (none found)"
  say "ldconfig -p (OpenCL)"
  ldconfig -p 2>/dev/null | grep -E 'libOpenCL|libnvidia-opencl' || echo "  (none)"
  local icd
  while read -r icd; do
    echo "  $icd names: $(head -c 300 "$icd")"
  done < <(grep '\.icd$' "$WORK/opencl_files")
  env | grep -E '^(OCL_|POCL_|OCLVM_|LD_LIBRARY_PATH|NVIDIA_)' | sed 's/^/  env: /'
}

# The driver's own OpenCL library, preferring /usr/local/nvidia's and the .so.1 name.
nvidia_library() {
  grep -E '/libnvidia-opencl\.so' "$WORK/opencl_files" |
    awk '{print (index($0, "/usr/local/nvidia") ? 0 : 1) (/\.so\.1$/ ? 0 : 1), $0}' |
    sort | head -1 | cut -d' ' -f2-
}

# Makes the ICD loader find NVIDIA's library: its folder on the library path, and an ICD file
# in a fresh vendors folder (beside copies of the machine's own) when no ICD file names it.
register_nvidia() {
  NV_LIB=$(nvidia_library)
  if [ -z "$NV_LIB" ]; then
    say "no libnvidia-opencl found: NVIDIA's OpenCL driver is not on this machine"
    return
  fi
  say "NVIDIA OpenCL library: $NV_LIB ($(readlink -f "$NV_LIB"))"
  LIBRARY_PATH_DIRS+=("$(dirname "$NV_LIB")")
  local unresolved
  unresolved=$(ldd "$NV_LIB" 2>&1 | grep 'not found')
  [ -z "$unresolved" ] || say "WARNING: $NV_LIB misses: $unresolved"
  local vendors=${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}
  if grep -qs 'libnvidia-opencl' "$vendors"/*.icd "$vendors"; then
    say "an ICD file in $vendors names it"
    return
  fi
  local dir="$WORK/vendors"
  mkdir -p "$dir"
  [ -d "$vendors" ] && cp "$vendors"/*.icd "$dir"/ 2>/dev/null
  readlink -f "$NV_LIB" >"$dir/nvidia.icd"
  export OCL_ICD_VENDORS=$dir
  say "no ICD file names it: wrote $dir/nvidia.icd ($(cat "$dir/nvidia.icd")), OCL_ICD_VENDORS=$dir"
}

# The machine's own ICD loader if it has one that the binaries can use, else the packed one.
choose_loader() {
  local system
  system=$(ldconfig -p 2>/dev/null | awk '$1 == "libOpenCL.so.1" && /x86-64/ {print $NF; exit}')
  if [ -z "$system" ]; then
    system=$(grep -E '/libOpenCL\.so\.1$' "$WORK/opencl_files" | grep -v "^$GPU/" | head -1)
    [ -n "$system" ] && LIBRARY_PATH_DIRS+=("$(dirname "$system")")
  fi
  local use_system=${system:+yes}
  case ${GPU_CHECK_LOADER:-} in
    carried) use_system= ;;
    system) [ -n "$system" ] || say "GPU_CHECK_LOADER=system, but the machine has no loader" ;;
  esac
  if [ -n "$use_system" ] && loader_serves "$system"; then
    say "ICD loader: the machine's own, $system"
  elif [ -f "$GPU/loader/libOpenCL.so.1" ]; then
    LIBRARY_PATH_DIRS=("$GPU/loader" "${LIBRARY_PATH_DIRS[@]}")
    say "ICD loader: the packed one, Debian's ocl-icd (the machine's: ${system:-none}${GPU_CHECK_LOADER:+, GPU_CHECK_LOADER=$GPU_CHECK_LOADER})"
  else
    say "WARNING: no ICD loader packed and ${system:-none on the machine}: nothing OpenCL will run"
  fi
}

# loader_serves LOADER: whether every packed binary finds libOpenCL's symbols with LOADER's
# folder first.
loader_serves() {
  local path
  path="$(dirname "$1"):$GPU/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [[ $(LD_LIBRARY_PATH=$path unresolved) != *libOpenCL* ]]
}

# .gpu/lib first, then the chosen folders; libstdc++ and libgcc_s from .gpu/fallback only when
# the machine's are missing or too old for the binaries.
set_library_path() {
  local dirs=("$GPU/lib" "${LIBRARY_PATH_DIRS[@]}") original=${LD_LIBRARY_PATH:-}
  export LD_LIBRARY_PATH
  LD_LIBRARY_PATH=$(IFS=:; echo "${dirs[*]}")${original:+:$original}
  if [[ $(unresolved) =~ libstdc|libgcc_s|GLIBCXX|CXXABI|GCC_ ]]; then
    say "the machine's libstdc++ or libgcc_s is missing or too old: using the packed ones"
    LD_LIBRARY_PATH=$GPU/fallback:$LD_LIBRARY_PATH
  fi
  say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  unresolved | sed 's/^/== gpu_check: WARNING: /'
}

# unresolved: each packed binary's libraries or symbol versions not found, a line each.
unresolved() {
  local bin
  for bin in "$GPU"/bin/*; do
    ldd "$bin" 2>&1 | grep 'not found' | sed "s|^[[:space:]]*|$(basename "$bin"): |"
  done
}

# Lists the platforms and picks one: NVIDIA's when the loader shows it. A listing that times out
# means OpenCL hangs here: the oclvm steps are then skipped rather than each timing out.
choose_platform() {
  local clinfo oclvm platforms=
  clinfo=$(bin clinfo)
  oclvm=$(bin oclvm)
  if [ -n "$clinfo" ] && step clinfo 30 "$clinfo" -l; then
    platforms=$(grep -i platform "$WORK/clinfo.out")
  elif [ -n "$clinfo" ] && timed_out clinfo; then
    OPENCL_HANGS=1
  elif [ -n "$oclvm" ]; then
    # No clinfo, or it failed: ask oclvm for the wanted platform directly.
    OCLVM_PLATFORM=$WANTED step probe-platform 30 "$oclvm" devices && platforms=$WANTED
    timed_out probe-platform && OPENCL_HANGS=1
  fi
  NVIDIA_PLATFORM=0
  if grep -qiF "$WANTED" <<<"$platforms"; then
    NVIDIA_PLATFORM=1
    export OCLVM_PLATFORM=$WANTED
    say "platform: $WANTED, OCLVM_PLATFORM=$WANTED"
    label_nvidia_driver
  elif [ -n "$NV_LIB" ]; then
    explain_missing_nvidia_platform
  fi
  [ -n "$oclvm" ] || { missing oclvm; return; }
  [ "$OPENCL_HANGS" = 0 ] && step oclvm-devices 30 "$oclvm" devices
  timed_out oclvm-devices && OPENCL_HANGS=1
  if [ "$OPENCL_HANGS" = 1 ]; then
    say "listing the OpenCL platforms timed out: OpenCL hangs here, the oclvm steps are skipped"
    SUMMARY+=("platform: OpenCL hangs while listing the platforms")
  elif [ "$NVIDIA_PLATFORM" = 1 ]; then
    SUMMARY+=("platform: $WANTED, opencl:0 is $(sed -n 's/^ *name: *//p' "$WORK/oclvm-devices.out" | head -1)")
  else
    local name
    name=$(sed -n 's/^platform: //p' "$WORK/oclvm-devices.out" | head -1)
    say "no $WANTED OpenCL; running on ${name:-no platform at all}"
    SUMMARY+=("platform: no $WANTED OpenCL; ran on ${name:-no platform at all}")
  fi
}

# vm_bench names its kernel-chain results after POCL_DEVICES' word for the device ("basic" when
# unset). With no PoCL registered, that word only labels, so the ratios say "nvidia".
label_nvidia_driver() {
  if [ -z "${POCL_DEVICES:-}" ] && ! grep -qil pocl "${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}"/*.icd \
       2>/dev/null; then
    export POCL_DEVICES=nvidia
  fi
}

# NVIDIA's library is there, the loader shows no NVIDIA platform: the loader's trace, and the
# library asked directly for its platforms (clIcdGetPlatformIDsKHR) through Python's ctypes.
explain_missing_nvidia_platform() {
  say "libnvidia-opencl is there but no NVIDIA platform shows: asking the loader and the library"
  local clinfo
  clinfo=$(bin clinfo)
  if [ -n "$clinfo" ] && [ "$OPENCL_HANGS" = 0 ]; then
    OCL_ICD_DEBUG=3 OCL_ICD_ENABLE_TRACE=1 step loader-trace 30 "$clinfo" -l
  fi
  local python
  python=$(command -v python3 || command -v python)
  [ -n "$python" ] && step nvidia-icd-direct 20 "$python" -c "$ASK_ICD_PY" "$NV_LIB"
}

# Python: asks the ICD library argv[1] how many platforms it has, as a loader does (the entry
# point exported, or through clGetExtensionFunctionAddress as PoCL has it); exit 0 when some.
ASK_ICD_PY='
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
prototype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_uint))
try:
    get = prototype(("clIcdGetPlatformIDsKHR", lib))
except AttributeError:
    lookup = lib.clGetExtensionFunctionAddress
    lookup.restype, lookup.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    address = lookup(b"clIcdGetPlatformIDsKHR")
    if not address:
        sys.exit("no clIcdGetPlatformIDsKHR in " + sys.argv[1])
    get = prototype(address)
count = ctypes.c_uint(0)
status = get(0, None, ctypes.byref(count))
print("clIcdGetPlatformIDsKHR: status", status, "(-1001: none), platforms:", count.value)
sys.exit(0 if status == 0 and count.value > 0 else 1)
'

run_tests() {
  local tests
  tests=$(bin oclvm_instructions_tests)
  if [ -n "$tests" ]; then
    oclvm_step kernel-tests 60 "$tests" --gtest_filter='*Kernel*:*Launch*' --gtest_brief=1
  else
    missing oclvm_instructions_tests
  fi
  local demo etests
  demo=$(bin eager_tensor_demo)
  etests=$(bin eager_tensor_tests)
  if [ -n "$demo" ]; then oclvm_step eager-tensor-demo 30 "$demo"; else missing eager_tensor_demo; fi
  if [ -n "$etests" ]; then
    oclvm_step eager-tensor-tests 45 "$etests" --gtest_brief=1
  else
    missing eager_tensor_tests
  fi
}

# bench NAME SECONDS FILTER: vm_bench on FILTER; --benchmark_min_time is a plain number of
# seconds for Google Benchmark 1.7 (the one packed) and takes an "s" from 1.8 on.
bench() {
  local name=$1 limit=$2 filter=$3 vm_bench
  vm_bench=$(bin vm_bench)
  [ -n "$vm_bench" ] || { missing vm_bench; return; }
  local flags=(--benchmark_filter="$filter")
  if oclvm_step "$name" "$limit" "$vm_bench" "${flags[@]}" --benchmark_min_time=0.05; then return; fi
  if grep -q 'unrecognized command-line flag: --benchmark_min_time' "$WORK/$name.out"; then
    unset 'SUMMARY[-1]'
    oclvm_step "$name" "$limit" "$vm_bench" "${flags[@]}" --benchmark_min_time=0.05s
  fi
}

# first_launches: a new process's first kernel launch, each run as a step of its own (a process
# that measures it from inside vm_bench may find the GPU held by its parent): with every cache
# empty (oclvm's, PoCL's, and NVIDIA's own compute cache), again with them as the first left
# them, and with oclvm's cache off (the driver's own cache alone).
first_launches() {
  local vm_bench root cold warm driver_only
  vm_bench=$(bin vm_bench)
  [ -n "$vm_bench" ] || { missing vm_bench; return; }
  root=$WORK/first-launch
  mkdir -p "$root/pocl" "$root/nv"
  export POCL_CACHE_DIR=$root/pocl CUDA_CACHE_PATH=$root/nv
  OCLVM_KERNEL_CACHE=$root/oclvm oclvm_step first-launch-cold 60 "$vm_bench" --first-launch
  OCLVM_KERNEL_CACHE=$root/oclvm oclvm_step first-launch-cached 60 "$vm_bench" --first-launch
  OCLVM_KERNEL_CACHE=0 oclvm_step first-launch-driver-cache 60 "$vm_bench" --first-launch
  unset POCL_CACHE_DIR CUDA_CACHE_PATH
  cold=$(tail -n1 "$WORK/first-launch-cold.out" 2>/dev/null)
  warm=$(tail -n1 "$WORK/first-launch-cached.out" 2>/dev/null)
  driver_only=$(tail -n1 "$WORK/first-launch-driver-cache.out" 2>/dev/null)
  if [[ $cold =~ ^[0-9.]+$ && $warm =~ ^[0-9.]+$ && $driver_only =~ ^[0-9.]+$ ]]; then
    {
      echo "first launch (us): empty caches $cold, both caches $warm, driver's cache alone $driver_only"
      awk -v c="$cold" -v w="$warm" -v d="$driver_only" 'BEGIN {
        printf "ratio kernel_first_launch_cold_vs_cached %.1f\n", c / w
        printf "ratio kernel_first_launch_driver_cache_vs_both %.1f\n", d / w }'
    } | tee "$WORK/first-launch.out"
  fi
}

summarize() {
  say "summary"
  {
    printf '%s\n' "${SUMMARY[@]}"
    local name
    for name in bench first-launch; do
      [ -f "$WORK/$name.out" ] && sed -n "s/^ratio /$name: ratio /p" "$WORK/$name.out"
    done
    echo "oclvm steps that succeeded: $STEPS_OK; took $((SECONDS - START)) s"
  } | tee "$OUT/summary.txt"
}

run_all() {
  WORK=$(mktemp -d /tmp/gpu_check_work.XXXXXX)
  LIBRARY_PATH_DIRS=()
  NV_LIB=
  say "started $(date -u +%Y-%m-%dT%H:%M:%SZ) in $ROOT; log $OUT/gpu_check.log"
  probe_machine
  probe_opencl
  register_nvidia
  choose_loader
  set_library_path
  choose_platform
  run_tests
  # One vm_bench process: the paired chains and first-launch runs follow every benchmark run.
  bench bench 150 'Kernel|AllocKernelRelease|RunRoundTrip/|DirectAllocatorPair'
  first_launches
  summarize
  rm -rf "$WORK"
  [ "$STEPS_OK" -gt 0 ] || { say "FAILED: no oclvm step succeeded"; return 1; }
}

run() {
  OUT=${OUT:-/tmp/gpu_check_out}
  mkdir -p "$OUT"
  [ -d "$GPU/bin" ] || say "WARNING: no $GPU/bin: run 'bash bench/gpu_check.sh pack' here first"
  run_all 2>&1 | tee "$OUT/gpu_check.log"
  exit "${PIPESTATUS[0]}"
}

case ${1:-} in
  pack) pack "${2:-build}" ;;
  run) run ;;
  *) usage ;;
esac
