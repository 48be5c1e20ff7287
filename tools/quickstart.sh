#!/usr/bin/env bash
# Installs what is missing, builds devgate, and runs the main job on its
# built-in default. Until `devgate accept` lands that is the environment proof,
# the device gate on every backend and a short run of the training fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDG_WERROR=OFF >/dev/null
cmake --build build -j"$(nproc)"
build/devgate env
echo
build/devgate gate
echo
build/devgate train --model lenet --batch 64 --steps 100 --sync-every 20
