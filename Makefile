# oclvm — the thin entry point. `make demo` and `make test` each install what is missing first.
SHARED ?= ../shared
BUILD  ?= build
JOBS   ?= $(shell nproc)

.PHONY: all setup configure build test demo bench clean

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j 2

demo: build
	$(BUILD)/oclvm replay $(SHARED)/traces/transformer_train.trace --allocator caching

bench: build
	$(BUILD)/allocator_bench
	$(BUILD)/oclvm replay $(SHARED)/traces/transformer_train.trace --allocator caching
	$(BUILD)/oclvm replay $(SHARED)/traces/cnn_train.trace --allocator caching

clean:
	rm -rf $(BUILD)
