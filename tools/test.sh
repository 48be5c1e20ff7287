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

# The tree stays formatted (.clang-format at the root): drift fails here,
# before anything is built. Fix with: git ls-files '*.c' '*.h' | xargs clang-format -i
if ! git ls-files '*.c' '*.h' | xargs clang-format --dry-run --Werror 2>/tmp/devgate-format.$$; then
  head -20 /tmp/devgate-format.$$ >&2
  rm -f /tmp/devgate-format.$$
  echo "test.sh: clang-format drift (see above)" >&2
  exit 1
fi
rm -f /tmp/devgate-format.$$

cmake -S . -B build -DDG_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

# The sanitizer build leaves the CUDA plug-in out: it cannot run without a GPU
# and nvcc-built objects are not instrumented anyway.
cmake -S . -B build-asan -DDG_WERROR=ON -DDG_SANITIZE=ON -DDG_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure -j"$jobs"
