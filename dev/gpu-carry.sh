#!/usr/bin/env bash
# Run here (Debian), before a device call: fills .devcarry (git-ignored) with a
# build of this tree and the Debian runtime libraries the GPU machine (Ubuntu
# 24.04) lacks, so `carry: [".devcarry"]` takes them along and
# dev/gpu-pass.sh finds them.
#   dev/gpu-carry.sh [BUILD_DIR]   devgate (Release, with the CUDA plug-in; default
#                                  build-carry) into .devcarry/bin
#   dev/gpu-carry.sh --fuzz        every libFuzzer harness (tools/fuzz.sh's build:
#                                  clang, ASan + UBSan) as .devcarry/fuzz.tar.xz (debug
#                                  info stripped, about 10 MB: a call carries 64 MiB),
#                                  for the pass `fuzz` (the GPU machine has no clang)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --fuzz ]; then
  FUZZ_BUILD_ONLY=1 tools/fuzz.sh
  stage=build-fuzz/carry/fuzz
  rm -rf "$stage" && mkdir -p "$stage" .devcarry
  for f in tests/fuzz/fuzz_*.c; do
    h=$(basename "$f" .c)
    strip --strip-debug -o "$stage/$h" "build-fuzz/tests/$h"
  done
  tar -C build-fuzz/carry -cJf .devcarry/fuzz.tar.xz fuzz
else
  b=${1:-build-carry}
  # bench/gemm_vs_clblast.c beside CLBlast where libclblast-dev is installed
  # (tools/deps.sh bench): the pass oclbench runs it, with libclblast1 below.
  clb=OFF
  dpkg-query -W -f='${Status}' libclblast-dev 2>/dev/null | grep -q "install ok installed" && clb=ON
  cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DDG_CUDA=ON -DDG_BENCH_CLBLAST=$clb >/dev/null
  cmake --build "$b" -j"$(nproc)" >/dev/null
  rm -rf .devcarry/bin && mkdir -p .devcarry/bin
  cp "$b/devgate" "$b/libdevgate-cuda.so" .devcarry/bin/
  [ -x "$b/gemm_vs_clblast" ] && cp "$b/gemm_vs_clblast" .devcarry/bin/
  cp -r "$b/python" .devcarry/bin/python
  for t in test_cuda test_ops test_gate test_gate_ops test_gate_link test_gate_sustain test_cpu_conv_paths; do [ -x "$b/tests/$t" ] && cp "$b/tests/$t" .devcarry/bin/; done
fi
# Debian's sonames the device has not: cJSON, libjpeg .so.62, LLVM's OpenMP
# (the harnesses are built with clang), CLBlast (gemm_vs_clblast), and what
# they pull.
mkdir -p .devcarry/debs
for p in libcjson1 libjpeg62-turbo libomp5-14 libclblast1; do
  ls .devcarry/debs/"${p}"_*.deb >/dev/null 2>&1 || (cd .devcarry/debs && apt-get download "$p" >/dev/null)
done
for d in .devcarry/debs/*.deb; do dpkg -x "$d" .devcarry/root; done
du -sh .devcarry | cut -f1
