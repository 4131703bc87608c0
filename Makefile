# Thin wrapper over CMake so that the quick start is two commands:
#   make bench   build, then run the default benchmark (GPU if present, else CPU)
#   make test    build, then run every test (CTest)
#   make install build, then install into PREFIX (default /usr/local; bin/fp4bench)
# Warnings are errors here (as in CI). BUILD picks the build folder.
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local

.PHONY: all build bench test install deps clean

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

# The check after it: without an install() rule in CMakeLists.txt, cmake
# --install succeeds and installs nothing, which must not pass for success.
install: build
	cmake --install $(BUILD) --prefix $(or $(PREFIX),/usr/local)
	@test -x $(or $(PREFIX),/usr/local)/bin/fp4bench || \
	  { echo "make install: $(or $(PREFIX),/usr/local)/bin/fp4bench was not installed (CMakeLists.txt has no install rule for it)" >&2; exit 1; }

clean:
	rm -rf $(BUILD)
