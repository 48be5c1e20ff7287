# Sourced by the dev/device-*.sh scripts on a GPU machine: the carried Debian
# runtime libraries, devgate's plug-in and ledger, and NVIDIA's OpenCL ICD
# (the image lists only PoCL in /etc/OpenCL/vendors). Sets $out.
out=${OUT:-/tmp/devgate-device}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.devcarry/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DEVGATE_PLUGIN_DIR="$PWD/build" DEVGATE_BIN="$PWD/build/devgate" DEVGATE_SRC="$PWD"
export DEVGATE_LEDGER="$out/ledger.db" LC_ALL=C PYTHONUNBUFFERED=1
nv=$(ls /usr/local/nvidia/lib64/libnvidia-opencl.so.1 2>/dev/null)
if [ -n "$nv" ]; then
  mkdir -p "$out/icd"
  echo "$nv" >"$out/icd/nvidia.icd"
  cp /etc/OpenCL/vendors/*.icd "$out/icd/" 2>/dev/null
  export OCL_ICD_VENDORS="$out/icd"
fi
