#!/usr/bin/env bash
# devgate env: the record's facts agree with the machine; --python inspects an
# interpreter and reports a missing one without failing.
. "$(dirname "$0")/lib.sh"

expect_exit 0 "$DG" env --json
host=$(uname -m)
case "$host" in amd64) host=x86_64 ;; arm64) host=aarch64 ;; esac
expect_json out "d['kind']=='env' and d['arch']['host']=='$host' and d['arch']['process']=='$host'"
expect_json out 'd["arch"]["translated"] is False'
expect_json out 'd["devgate"]["version"] and d["devgate"]["commit"] and d["devgate"]["compiler"]'
expect_json out 'd["libraries"]["sqlite"] and d["libraries"]["openblas"]'
expect_json out '[b["name"] for b in d["backends"]]==["cpu","opencl","cuda"] and d["backends"][0]["available"]'
expect_json out 'd["memory"]["total"]["valid"] and d["memory"]["total"]["value"]>0'
# Where the proof's time went: each backend's probe (threads beside the host facts), the whole.
expect_json out 'all(b["wall"]["valid"] and b["wall"]["unit"] == "s" and 0 <= b["wall"]["value"] <= d["walls"]["all"]["value"] + 0.05 for b in d["backends"]) and d["walls"]["host"]["valid"] and 0 < d["walls"]["host"]["value"] <= d["walls"]["all"]["value"] and not d["walls"]["python"]["valid"]'
expect_json out 'len(d["processes"]["top_cpu"])<=10 and len(d["processes"]["top_mem"])<=10'
expect_json out '"run_id" in d'
expect_json out 'd["git"]["is_repo"] is False'

expect_exit 0 "$DG" --no-ledger env
for label in architecture virtualization os cpu memory backends 'busiest processes'; do
  expect_grep out "$label" "human env output"
done

expect_exit 0 "$DG" --no-ledger env --python "$T/no-such-python" --json
expect_json out 'd["python"]["run"]["status"]=="not-found"'

if [ -x /usr/bin/python3 ]; then
  expect_exit 0 "$DG" --no-ledger env --python /usr/bin/python3 --python-timeout 180 --json
  expect_json out 'd["python"]["run"]["status"]=="ok" and d["python"]["version"]'
  expect_json out "d['python']['arch_matches_host'] is True"
fi
expect_exit 2 "$DG" --no-ledger env --python-timeout -1

expect_exit 0 "$DG" --version
expect_grep out '^devgate [0-9]+\.[0-9]+\.[0-9]+ \(commit [^;]+; .*backends: cpu'

# The proof opens an OpenCL device without building devgate's program (a cold
# platform compiles it for seconds): neither devgate's binary cache (GPUs) nor
# PoCL's kernel cache (CPUs) gains a file (PoCL leaves a tempfile_ at any start); the gate builds it and one does.
"$DG" --no-ledger env --json >"$T/envj" 2>/dev/null
if python3 -c 'import json,sys; sys.exit(not json.load(open(sys.argv[1]))["backends"][1]["available"])' "$T/envj"; then
  mkdir -p "$T/oclcache" "$T/poclcache"
  export DEVGATE_OPENCL_CACHE="$T/oclcache" POCL_CACHE_DIR="$T/poclcache"
  expect_exit 0 "$DG" --no-ledger env --json
  expect_json out 'd["backends"][1]["available"] and d["backends"][1]["devices"] and d["backends"][1]["versions"]'
  n=$(find "$T/oclcache" "$T/poclcache" -type f ! -name "tempfile_*" | wc -l)
  [ "$n" = 0 ] && ok || bad "env left $n file(s) in the OpenCL program caches"
  expect_exit 0 "$DG" --no-ledger gate --backend opencl --json
  n=$(find "$T/oclcache" "$T/poclcache" -type f ! -name "tempfile_*" | wc -l)
  [ "$n" -gt 0 ] && ok || bad "gate --backend opencl left the OpenCL program caches empty"
  unset DEVGATE_OPENCL_CACHE POCL_CACHE_DIR
fi

done_tests
