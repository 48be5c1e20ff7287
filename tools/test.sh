#!/usr/bin/env bash
# Builds and runs the whole default test suite: the normal build with warnings
# as errors, then the library again under AddressSanitizer and
# UndefinedBehaviorSanitizer. Long runs live elsewhere (bench/).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh test
# The browser check of the report page must run here, not skip.
export DEVGATE_REQUIRE_CHROMIUM=1
jobs=$(nproc)

cmake -S . -B build -DDG_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

# The sanitizer build leaves the CUDA plug-in out: it cannot run without a GPU
# and nvcc-built objects are not instrumented anyway.
cmake -S . -B build-asan -DDG_WERROR=ON -DDG_SANITIZE=ON -DDG_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure -j"$jobs"
