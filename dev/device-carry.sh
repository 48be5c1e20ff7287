# Sourced by the dev/device-*.sh scripts of 2026-12-01's third round, from the
# repository root, with the log's name as $1: the carried build ($CARRY/bin,
# default .devcarry/bin: devgate, libdevgate-cuda.so, test_cuda, python/) and
# Debian runtime libraries ($CARRY/root), devgate's plug-in, ledger and source
# folder, and everything the script prints after this teed to $out/$1.log.
carry=$(cd "${CARRY:-.devcarry}" && pwd)
out=${OUT:-/tmp/devgate-device}
mkdir -p "$out"
exec > >(tee -a "$out/$1.log") 2>&1
bin=$carry/bin
export LD_LIBRARY_PATH="$carry/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVGATE_PLUGIN_DIR="$bin" DEVGATE_BIN="$bin/devgate" DEVGATE_SRC="$PWD"
export DEVGATE_LEDGER="$out/ledger.db" LC_ALL=C PYTHONUNBUFFERED=1
DG=$bin/devgate
