#!/usr/bin/env bash
# Installs what oclvm needs on a fresh Debian machine; idempotent and quick when already done.
#   - Debian packages: PoCL (the default OpenCL device), the ICD loader and headers, OpenCL-CLHPP,
#     Boost (Intrusive), GoogleTest, Google Benchmark, CLBlast (examples/eager_tensor's matmul),
#     clinfo, cmake; clang-15 with
#     libclang-common-15-dev (its libFuzzer and sanitizer runtimes) and llvm-15 (llvm-symbolizer,
#     for readable sanitizer reports), for `make fuzz`, `make asan` and `make tsan`; valgrind, for
#     `make bench`'s instruction counts (bench/instruction_count.py).
#   - .venv/ with torch==2.13.0 (the CPU build kept on this machine), pytest, numpy and
#     scikit-build-core (the build backend of the oclvm Python package, which builds against the
#     venv's torch: pyproject.toml).
# A stamp file per step records success so a second run costs milliseconds.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp_dir=build/.setup
mkdir -p "$stamp_dir"

apt_packages=(pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
              libboost-dev libgtest-dev libbenchmark-dev libclblast-dev clinfo cmake g++ make
              clang-15 libclang-common-15-dev llvm-15 valgrind)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python environments. torch is pinned to a build that lies on this machine's disk; pip is told
# the exact version so it can never resolve a newer (CUDA) build. `setup.sh` makes .venv with
# torch 2.13.0 (the CPU build); `setup.sh --torch 2.14.1 --venv DIR` makes DIR with torch 2.14.1
# (a CUDA build of about 5.5 GB: `make test-torch-2.14`).
torch_version=2.13.0
venv=.venv
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) torch_version=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    *) echo "setup.sh: expected --torch VERSION or --venv DIR, but got '$1'" >&2; exit 2 ;;
  esac
done
venv_stamp="$stamp_dir/$(basename "$venv")-torch-$torch_version-skbuild"
if [ ! -f "$venv_stamp" ] || [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv with torch==$torch_version, pytest, numpy, scikit-build-core"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "torch==$torch_version" pytest numpy "scikit-build-core>=0.9"
  "$venv/bin/python" -c "import torch; assert torch.__version__.startswith('$torch_version'), torch.__version__"
  touch "$venv_stamp"
fi

# Test dependencies of the conformance suite (design/conformance.md): PyTorch's OpInfo database
# needs expecttest and hypothesis to import; the model families build Hugging Face transformers
# models from small random-initialised configs (pure Python, nothing downloaded at run time);
# accelerate's batch-size search reads the device's out-of-memory errors (test_memory.py);
# diffusers (a UNet and its scheduler) and peft (LoRA) join the model families.
# Pinned so that a new release cannot change what make test runs.
test_deps=("transformers==5.23.0" "expecttest==0.3.0" "hypothesis==6.170.15" "accelerate==1.15.0" "diffusers==0.42.1" "peft==0.21.2")
deps_stamp="$stamp_dir/$(basename "$venv")-test-deps-$(echo "${test_deps[*]}" | md5sum | cut -c1-12)"
if [ ! -f "$deps_stamp" ]; then
  echo "setup: installing test dependencies into $venv: ${test_deps[*]}"
  "$venv/bin/pip" install -q "${test_deps[@]}"
  "$venv/bin/python" -c "import transformers, expecttest, hypothesis, accelerate, diffusers, peft"
  touch "$deps_stamp"
fi
