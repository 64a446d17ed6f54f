# The two set-up commands: `make demo` and `make test`. Both install their dependencies.
BUILD ?= build
JOBS ?= $(shell nproc)
# The libFuzzer targets (fuzz/, clang) build in a directory of their own; `make test` runs each
# for FUZZ_SECONDS over its seed corpus (docs/RELIABILITY.md; bench/fuzz.sh runs them for hours).
FUZZ_BUILD ?= $(BUILD)-fuzz
FUZZ_SECONDS ?= 10

.PHONY: deps build fuzz-build test demo clean

deps:
	scripts/install_deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

fuzz-build: deps
	CXX=clang++ cmake -S fuzz -B $(FUZZ_BUILD) >/dev/null
	cmake --build $(FUZZ_BUILD) -j$(JOBS)

test: build fuzz-build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 900
	fuzz/run_fuzzers.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
