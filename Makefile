# oclvm — the thin entry point. `make demo` and `make test` each install what is missing first.
SHARED ?= ../shared
BUILD  ?= build
JOBS   ?= $(shell nproc)
PY     ?= .venv/bin/python

.PHONY: all setup configure build torch test demo bench clean

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
	$(PY) -m pytest -q tests/torch
	POCL_DEVICES="pthread pthread" $(PY) -m pytest -q tests/torch

demo: build torch
	$(PY) examples/torch_demo.py

bench: build torch
	$(BUILD)/allocator_bench
	POCL_DEVICES="basic basic" $(BUILD)/vm_bench
	$(PY) bench/torch_bench.py
	$(BUILD)/oclvm replay $(SHARED)/traces/transformer_train.trace --allocator caching
	$(BUILD)/oclvm replay $(SHARED)/traces/cnn_train.trace --allocator caching

clean:
	rm -rf $(BUILD) build-torch build-torch-wheel
