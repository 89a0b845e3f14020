# oclvm — the thin entry point. `make demo` and `make test` each install what is missing first.
# Allocation traces for `make bench` to replay (oclvm-trace v1 files): the shipped ones in traces/
# by default, or every *.trace in TRACES=DIR.
TRACES ?= traces
BUILD  ?= build
JOBS   ?= $(shell nproc)
PY     ?= .venv/bin/python

.PHONY: all setup configure build install torch test package stress exit-soak demo bench bench-compile clean
.PHONY: torch-stress torch-lane-1 torch-lane-2
.PHONY: asan tsan sanitize
.PHONY: fuzz opinfo module-db
.PHONY: test-torch-2.14

all: build

setup:
	@bash scripts/setup.sh

# Every build the Makefile configures turns warnings into errors (OCLVM_WERROR, CMakeLists.txt);
# `make torch` (pip install .) does not: it is the path a user takes.
WERROR = -DOCLVM_WERROR=ON

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(WERROR) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The PyTorch backend: the `oclvm` Python package (adapters/torch + python/oclvm), built by
# scikit-build-core against the venv's torch and installed into .venv (incremental: the build
# tree is build-torch-wheel/).
torch: setup
	@echo "installing the oclvm Python package into .venv (builds adapters/torch)"
	@$(PY) -m pip install -q --no-deps .

# `make test` installs the package from its own build tree, build-torch-test/, configured with
# warnings as errors and the adapter's GoogleTest suite: one compile of the core and the adapter
# gives both the installed module the Python tests import and oclvm_torch_tests.
TORCH_TEST_TREE = build-torch-test
# Built as users build it (RelWithDebInfo: -O2, link-time optimisation), without the debug
# information no test reads: the install from scratch takes 5 min 37 s instead of 8 min 44 s.
TORCH_TEST_PIP  = -C build-dir=$(TORCH_TEST_TREE) -C cmake.define.OCLVM_WERROR=ON \
                  -C cmake.define.OCLVM_TORCH_TESTS=ON \
                  -C "cmake.define.CMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG"
# Each pass of the torch tests lists its 10 slowest tests, so the log shows where CI's time goes;
# no pytest cache: two passes run at once (torch-lane-1, torch-lane-2).
PYTEST_TORCH = $(PY) -m pytest -q -p no:cacheprovider --durations=10 tests/torch
# Torch's exit with three busy daemon threads (tests/torch/test_exit.py), 76 runs in all.
BUSY_EXIT = tests/torch/test_exit.py::test_exit_with_busy_daemon_threads
PYTEST_EXIT = $(PY) -m pytest -q -p no:cacheprovider --durations=5

test: build setup
	python3 scripts/check_docs.py --self-test
	python3 scripts/check_docs.py
	cd $(BUILD) && ctest --output-on-failure -j 2
	@bash scripts/check_package.sh $(BUILD)
	@echo "installing the oclvm Python package into .venv from $(TORCH_TEST_TREE) (with oclvm_torch_tests)"
	@$(PY) -m pip install -q --no-deps $(TORCH_TEST_PIP) .
	cd $(TORCH_TEST_TREE) && ctest --output-on-failure
	@echo "the torch tests: three pytest passes in two lanes side by side (torch-lane-1, torch-lane-2);"
	@echo "each lane's output appears when the lane ends"
	@$(MAKE) --no-print-directory -j 2 --output-sync=target torch-lane-1 torch-lane-2

# Each exit script runs 4 times on the default device and twice in the other configurations
# (OCLVM_EXIT_RUNS; the busy-daemon exits keep their own count).
# Lane 1 of `make test`'s torch tests: everything, OpInfo and module_db included, on the default
# device; then, to even the lanes, the exit tests on two pthread devices that lane 2's passes
# leave out: the busy-daemon exits in host sections (2.6 min), and the rest of test_exit.py with
# operands copied (2.4 min when it ran each script 4 times); and on the native path
# (OCLVM_KERNELS=native: the operators with OpenCL kernels compute on the device), the model
# families on two basic devices (1.3 min), the native kernels' tests on two basic devices, in
# host sections and with operands copied (0.1 min each; PoCL's pthread devices build each kernel
# slowly: 2 min), and module_db and the peer tests (3.5 min).
torch-lane-1:
	OCLVM_EXIT_RUNS=4 $(PYTEST_TORCH)
	OCLVM_KERNELS=native POCL_DEVICES="basic basic" $(PYTEST_EXIT) tests/torch/test_model_families.py
	OCLVM_KERNELS=native POCL_DEVICES="basic basic" $(PYTEST_EXIT) tests/torch/test_native_kernels.py \
	  tests/torch/test_native_launches.py tests/torch/test_native_index.py \
	  tests/torch/test_native_scatter.py tests/torch/test_native_blas.py \
	  tests/torch/test_native_conv.py tests/torch/test_native_channel_norm.py \
	  tests/torch/test_native_attention.py tests/torch/test_native_random.py \
	  tests/torch/test_native_pool.py
	OCLVM_KERNELS=native OCLVM_ZERO_COPY=0 POCL_DEVICES="basic basic" $(PYTEST_EXIT) \
	  tests/torch/test_native_kernels.py tests/torch/test_native_index.py \
	  tests/torch/test_native_scatter.py tests/torch/test_native_blas.py \
	  tests/torch/test_native_conv.py tests/torch/test_native_channel_norm.py \
	  tests/torch/test_native_attention.py
	OCLVM_KERNELS=native $(PYTEST_EXIT) tests/torch/test_module_db.py tests/torch/test_cuda_parity.py \
	  tests/torch/test_openreg_*.py
	OCLVM_EXIT_RUNS=4 POCL_DEVICES="pthread pthread" $(PYTEST_EXIT) \
	  "$(BUSY_EXIT)[device_200_rounds]" "$(BUSY_EXIT)[device_until_exit]"
	OCLVM_EXIT_RUNS=2 OCLVM_ZERO_COPY=0 POCL_DEVICES="pthread pthread" $(PYTEST_EXIT) \
	  tests/torch/test_exit.py --deselect $(BUSY_EXIT)

# Lane 2: the torch tests again on two pthread devices without the OpInfo and module_db sweeps,
# first in host sections without the busy-daemon exits and the native kernels' subprocess, then
# with operands copied (OCLVM_ZERO_COPY=0) without test_exit.py; lane 1 runs what they leave
# out. The CPU's own busy-daemon exit (0.5 min, no device in it) runs in lane 1's first pass
# only; with operands copied, the compiled frames run eagerly, so the transformers' compiled steps
# (1.5 min) are the eager steps test_model_families already trains and are left out.
torch-lane-2:
	OCLVM_EXIT_RUNS=2 OCLVM_OPINFO=0 OCLVM_DIST_FULL=0 POCL_DEVICES="pthread pthread" $(PYTEST_TORCH) \
	  --deselect $(BUSY_EXIT) \
	  --deselect tests/torch/test_native_kernels.py::test_native_path_in_a_subprocess \
	  --deselect tests/torch/test_native_launches.py::test_native_launches_in_a_subprocess \
	  --deselect tests/torch/test_native_index.py::test_native_index_in_a_subprocess \
	  --deselect tests/torch/test_native_scatter.py::test_native_scatter_in_a_subprocess \
	  --deselect tests/torch/test_native_blas.py::test_native_blas_in_a_subprocess \
	  --deselect tests/torch/test_native_conv.py::test_native_conv_in_a_subprocess \
	  --deselect tests/torch/test_native_channel_norm.py::test_native_channel_norm_in_a_subprocess \
	  --deselect tests/torch/test_native_attention.py::test_native_attention_in_a_subprocess
	OCLVM_EXIT_RUNS=2 OCLVM_OPINFO=0 OCLVM_DIST_FULL=0 OCLVM_ZERO_COPY=0 POCL_DEVICES="pthread pthread" $(PYTEST_TORCH) \
	  --deselect tests/torch/test_compile.py::test_compiled_transformer_step_equals_eager_on_cpu \
	  --ignore tests/torch/test_exit.py

# The torch tests against torch 2.14.1, the current release (the default `make test` uses 2.13.0):
# its own venv (.venv-torch-2.14: a CUDA build of torch, about 5.5 GB, which the adapter builds
# against without CUDA: Note [Any build of torch] in adapters/torch/CMakeLists.txt) and build
# tree. Kept out of `make test` for its size; run it once per change to the adapter.
TORCH214_VENV = .venv-torch-2.14
test-torch-2.14: setup
	@bash scripts/setup.sh --torch 2.14.1 --venv $(TORCH214_VENV)
	@echo "installing the oclvm Python package into $(TORCH214_VENV) (torch 2.14.1)"
	@$(TORCH214_VENV)/bin/python -m pip install -q --no-deps -C build-dir=build-torch-2.14 \
	  -C cmake.define.OCLVM_WERROR=ON .
	OCLVM_EXIT_RUNS=4 $(TORCH214_VENV)/bin/python -m pytest -q tests/torch

# The C++ package for embedders (design/embedding.md): headers under $(PREFIX)/include/oclvm, the
# libraries, bin/oclvm and lib/cmake/oclvm for find_package(oclvm).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# oclvm as an embedder meets it (design/embedding.md): `cmake --install` into $(BUILD)/package/prefix,
# then tests/package, examples/quickstart and examples/eager_tensor built as separate CMake
# projects against that prefix alone, and their tests run (scripts/check_package.sh).
package: build
	@bash scripts/check_package.sh $(BUILD)

# The C++ stress program at length: 4 producers x 2 devices x 1,000,000 instructions each, then
# the same under injected faults (bench/stress.cc; a few minutes).
stress: build
	POCL_DEVICES="basic basic" $(BUILD)/stress --threads 4 --devices 2 --instructions 1000000
	POCL_DEVICES="basic basic" $(BUILD)/stress --threads 4 --devices 2 --instructions 1000000 \
	  --faults segment:p=0.2,copy:p=0.001,fill:p=0.001,finish:p=0.002,build:p=0.1,launch:p=0.002,seed=11

# The PyTorch stress at length: 4 threads x 60 s of random tensor work, on one device and on two
# (tests/torch/test_stress.py; OCLVM_TORCH_STRESS_SEED replays a run).
torch-stress: torch
	OCLVM_TORCH_STRESS_SECONDS=60 $(PY) -m pytest -q -s tests/torch/test_stress.py
	OCLVM_TORCH_STRESS_SECONDS=60 POCL_DEVICES="pthread pthread" $(PY) -m pytest -q -s tests/torch/test_stress.py

# Exit safety at length: the C++ exit probe and every Python exit script 100 times each, with
# varied timing, on one and on two devices (a few minutes).
exit-soak: build torch
	OCLVM_EXIT_RUNS=100 $(BUILD)/oclvm_exit_tests
	OCLVM_EXIT_RUNS=100 POCL_DEVICES="pthread pthread" $(BUILD)/oclvm_exit_tests
	OCLVM_EXIT_RUNS=100 $(PY) -m pytest -q tests/torch/test_exit.py

# Sanitizer runs of the C++ tests: every ctest entry of the top-level project (the suites on one
# and two devices, the cli and script entries, exit safety, the short stress runs, the fuzz
# regressions), built by clang in build-asan / build-tsan (Debug, -O1; benchmarks and the torch
# adapter left out). LeakSanitizer runs at every exit: nothing may leak. The only size cut down
# is OCLVM_EXIT_RUNS (4 instead of 20; `make exit-soak` has the long form). A finding exits with
# status 66, which no test expects. sanitizers/ holds the suppressions and their rules. From
# clean on a shared 2-core machine: about 8 min each (build 5-6 min, ctest 2-3 min).
SAN_CC    ?= clang-15
SAN_CXX   ?= clang++-15
SAN_JOBS  ?= 2
# One ctest entry per suite and run, not per test: a process per test would add minutes under the
# sanitizers (OCLVM_DISCOVER_TESTS in CMakeLists.txt).
SAN_CMAKE  = -DCMAKE_BUILD_TYPE=Debug -DOCLVM_BUILD_TESTS=ON -DOCLVM_BUILD_BENCH=OFF \
             -DCMAKE_CXX_COMPILER=$(SAN_CXX) $(WERROR) -DOCLVM_DISCOVER_TESTS=OFF
SAN_FLAGS  = -O1 -g -fno-omit-frame-pointer
SAN_ENV    = OCLVM_EXIT_RUNS=4
SAN_COMMON = external_symbolizer_path=/usr/lib/llvm-15/bin/llvm-symbolizer:exitcode=66
ASAN_FLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined
TSAN_FLAGS = -fsanitize=thread
# intercept_tls_get_addr=0: LeakSanitizer's exit scan otherwise walks the dynamic TLS blocks it
# recorded through __tls_get_addr, and PoCL dlopens libraries as it builds kernels. In the
# instructions suite one recorded block was garbage ("DTLS 6 at 0x320c-0x18000430e") and the
# scan's tracer died of SIGSEGV, failing the suite with no report (1 run in 3 under ctest -j2,
# every run with LSAN_OPTIONS=verbosity=1; 0 in 4 with this flag). Without those blocks LSan has
# fewer roots, so it can only report more leaks, never hide one.
ASAN_ENV   = ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:intercept_tls_get_addr=0:$(SAN_COMMON) \
             LSAN_OPTIONS=suppressions=$(CURDIR)/sanitizers/lsan.supp:print_suppressions=0 \
             UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:$(SAN_COMMON)
TSAN_ENV   = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:$(SAN_COMMON):suppressions=$(CURDIR)/sanitizers/tsan.supp:print_suppressions=0

asan: setup
	@echo "=== make asan: AddressSanitizer + UndefinedBehaviorSanitizer (build-asan)"
	@CC=$(SAN_CC) CXX=$(SAN_CXX) cmake -S . -B build-asan $(SAN_CMAKE) \
	  -DCMAKE_CXX_FLAGS="$(SAN_FLAGS) $(ASAN_FLAGS)" -DCMAKE_EXE_LINKER_FLAGS="$(ASAN_FLAGS)" >/dev/null
	@cmake --build build-asan -j $(SAN_JOBS)
	cd build-asan && $(SAN_ENV) $(ASAN_ENV) ctest --output-on-failure -j 2

tsan: setup
	@echo "=== make tsan: ThreadSanitizer (build-tsan)"
	@CC=$(SAN_CC) CXX=$(SAN_CXX) cmake -S . -B build-tsan $(SAN_CMAKE) \
	  -DCMAKE_CXX_FLAGS="$(SAN_FLAGS) $(TSAN_FLAGS)" -DCMAKE_EXE_LINKER_FLAGS="$(TSAN_FLAGS)" >/dev/null
	@cmake --build build-tsan -j $(SAN_JOBS)
	cd build-tsan && $(SAN_ENV) $(TSAN_ENV) ctest --output-on-failure -j 2

sanitize: asan tsan

# PyTorch's OpInfo corpus, every sample of every operator in six dtypes, device against the CPU
# (design/conformance.md); rewrites design/opinfo.md. Resumes from build/opinfo.jsonl when it
# exists (delete it for a fresh sweep). About half an hour on two cores.
opinfo: torch
	$(PY) tests/torch/conformance/opinfo_sweep.py --out $(BUILD)/opinfo.jsonl --resume \
	  --table design/opinfo.md

# PyTorch's module corpus (module_db), forward and backward, device against the CPU, every sample
# (design/conformance.md); rewrites design/module_db.md. A few minutes on two cores.
module-db: torch
	$(PY) tests/torch/conformance/module_sweep.py --out $(BUILD)/module_db.jsonl --resume \
	  --table design/module_db.md

demo: build torch
	$(PY) examples/torch_demo.py

bench: build torch
	$(BUILD)/allocator_bench
	POCL_DEVICES="basic basic" $(BUILD)/vm_bench --benchmark_filter=-Kernel
	POCL_DEVICES="basic pthread" $(BUILD)/vm_bench --benchmark_filter=Kernel
	$(PY) bench/torch_bench.py
	$(PY) bench/family_fallbacks.py
	$(PY) bench/instruction_count.py
	$(PY) bench/dist_bench.py

# Section (g) of bench/torch_bench.py: GPT-2 under torch.compile on the device (minutes: it compiles).
bench-compile: torch
	$(PY) bench/torch_bench.py --compile
	@for trace in $(if $(TRACES),$(wildcard $(TRACES)/*.trace)); do \
	  echo "$(BUILD)/oclvm replay $$trace --allocator caching"; \
	  $(BUILD)/oclvm replay $$trace --allocator caching || exit 1; \
	done

# libFuzzer on the two text parsers (fuzz/README.md): builds the fuzzers with clang in
# build-fuzz/ (tests and benchmarks off), then runs each for FUZZ_SECONDS over a scratch copy of
# its seed corpus; non-zero when one finds something (the input lands in build-fuzz/artifacts/).
# CI runs `make fuzz` with the default 60 seconds each.
FUZZ_SECONDS ?= 60
FUZZ_MAX_LEN ?= 4096
FUZZ_CXX     ?= clang++-15

fuzz: setup
	@cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) -DOCLVM_FUZZ=ON \
	  -DOCLVM_BUILD_TESTS=OFF -DOCLVM_BUILD_BENCH=OFF $(WERROR) >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target script_fuzzer trace_fuzzer
	@bash fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_MAX_LEN)

clean:
	rm -rf $(BUILD) build-torch build-torch-wheel $(TORCH_TEST_TREE)
