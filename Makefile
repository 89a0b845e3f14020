# oclvm — the thin entry point. `make demo` and `make test` each install what is missing first.
SHARED ?= ../shared
BUILD  ?= build
JOBS   ?= $(shell nproc)
PY     ?= .venv/bin/python

.PHONY: all setup configure build torch test stress exit-soak demo bench clean
.PHONY: fuzz

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The PyTorch backend: the `oclvm` Python package (adapters/torch + python/oclvm), built by
# scikit-build-core against the venv's torch and installed into .venv (incremental: the build
# tree is build-torch-wheel/).
torch: setup
	@echo "installing the oclvm Python package into .venv (builds adapters/torch)"
	@$(PY) -m pip install -q --no-build-isolation --no-deps .

test: build torch
	cd $(BUILD) && ctest --output-on-failure -j 2
	@cmake -S adapters/torch -B build-torch -DOCLVM_TORCH_TESTS=ON >/dev/null
	@cmake --build build-torch -j $(JOBS) --target oclvm_torch_tests
	cd build-torch && ctest --output-on-failure
	OCLVM_EXIT_RUNS=4 $(PY) -m pytest -q tests/torch
	OCLVM_EXIT_RUNS=4 POCL_DEVICES="pthread pthread" $(PY) -m pytest -q tests/torch

# The C++ stress program at length: 4 producers x 2 devices x 1,000,000 instructions each, then
# the same under injected faults (bench/stress.cc; a few minutes).
stress: build
	POCL_DEVICES="basic basic" $(BUILD)/stress --threads 4 --devices 2 --instructions 1000000
	POCL_DEVICES="basic basic" $(BUILD)/stress --threads 4 --devices 2 --instructions 1000000 \
	  --faults segment:p=0.2,copy:p=0.001,fill:p=0.001,finish:p=0.002,seed=11

# Exit safety at length: the C++ exit probe and every Python exit script 100 times each, with
# varied timing, on one and on two devices (a few minutes).
exit-soak: build torch
	OCLVM_EXIT_RUNS=100 $(BUILD)/oclvm_exit_tests
	OCLVM_EXIT_RUNS=100 POCL_DEVICES="pthread pthread" $(BUILD)/oclvm_exit_tests
	OCLVM_EXIT_RUNS=100 $(PY) -m pytest -q tests/torch/test_exit.py

demo: build torch
	$(PY) examples/torch_demo.py

bench: build torch
	$(BUILD)/allocator_bench
	POCL_DEVICES="basic basic" $(BUILD)/vm_bench
	$(PY) bench/torch_bench.py
	$(BUILD)/oclvm replay $(SHARED)/traces/transformer_train.trace --allocator caching
	$(BUILD)/oclvm replay $(SHARED)/traces/cnn_train.trace --allocator caching

# libFuzzer on the two text parsers (fuzz/README.md): builds the fuzzers with clang in
# build-fuzz/ (tests and benchmarks off), then runs each for FUZZ_SECONDS over a scratch copy of
# its seed corpus; non-zero when one finds something (the input lands in build-fuzz/artifacts/).
# CI runs `make fuzz` with the default 60 seconds each.
FUZZ_SECONDS ?= 60
FUZZ_MAX_LEN ?= 4096
FUZZ_CXX     ?= clang++-15

fuzz: setup
	@cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) -DOCLVM_FUZZ=ON \
	  -DOCLVM_BUILD_TESTS=OFF -DOCLVM_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target script_fuzzer trace_fuzzer
	@bash fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_MAX_LEN)

clean:
	rm -rf $(BUILD) build-torch build-torch-wheel
