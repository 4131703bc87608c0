# Thin wrapper over CMake so that the quick start is two commands:
#   make bench   build, then run the default benchmark (GPU if present, else CPU)
#   make test    build, then run every test (CTest)
# Warnings are errors here (as in CI). BUILD picks the build folder.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all build bench test deps clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFP4_WERROR=ON $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

bench: build
	./$(BUILD)/fp4bench

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
