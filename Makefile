# The two set-up commands: `make demo` and `make test`. Both install their dependencies.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build test demo clean

deps:
	scripts/install_deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 900

demo: build
	scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
