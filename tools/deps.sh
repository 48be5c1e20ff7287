#!/usr/bin/env bash
# Installs the Debian packages devgate needs (as root), or prints the exact
# apt-get line to run (otherwise). Usage: tools/deps.sh [build|test|bench]
# (bench: the libraries of the optional bench programs, e.g. CLBlast for
# -DDG_BENCH_CLBLAST=ON; not part of the test tier)
set -euo pipefail
tier=${1:-build}
pkgs=(build-essential cmake pkg-config git
      libopenblas-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
      libsqlite3-dev libcjson-dev libssl-dev libpng-dev libjpeg62-turbo-dev zlib1g-dev
      libpq-dev libcurl4-openssl-dev)
if [ "$tier" = test ]; then
  pkgs+=(sqlite3 python3 python3-torch python3-jsonschema clang clang-format libclang-rt-14-dev chromium)
  # the streaming inference server devgate slo's tests run on the loopback
  pkgs+=(python3-aiohttp)
  # throwaway servers of the team-scale tests (tools/servers.sh)
  pkgs+=(postgresql-15 openssh-server openssh-client slurmctld slurmd slurm-client munge)
fi
if [ "$tier" = bench ]; then
  pkgs+=(libclblast-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "devgate needs these Debian packages; run as root:" >&2
  echo "  apt-get update && $line" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
$line
