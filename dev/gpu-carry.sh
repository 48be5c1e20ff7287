#!/usr/bin/env bash
# Run here (Debian), before a device call: fills .devcarry (git-ignored) with a
# build of this tree and the Debian runtime libraries the GPU machine (Ubuntu
# 24.04) lacks, so `carry: [".devcarry"]` takes them along and
# dev/gpu-pass.sh finds them. Usage: dev/gpu-carry.sh [BUILD_DIR] (default
# build-carry, configured Release with the CUDA plug-in).
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build-carry}
cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DDG_CUDA=ON >/dev/null
cmake --build "$b" -j"$(nproc)" >/dev/null
rm -rf .devcarry/bin && mkdir -p .devcarry/bin .devcarry/debs
cp "$b/devgate" "$b/libdevgate-cuda.so" .devcarry/bin/
cp -r "$b/python" .devcarry/bin/python
for t in test_cuda test_ops test_gate; do [ -x "$b/tests/$t" ] && cp "$b/tests/$t" .devcarry/bin/; done
# Debian's sonames the device has not: cJSON, libjpeg .so.62, and what they pull.
if [ ! -d .devcarry/root/usr/lib/x86_64-linux-gnu ]; then
  (cd .devcarry/debs && apt-get download libcjson1 libjpeg62-turbo >/dev/null)
  for d in .devcarry/debs/*.deb; do dpkg -x "$d" .devcarry/root; done
fi
du -sh .devcarry | cut -f1
