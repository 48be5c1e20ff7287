#!/usr/bin/env bash
# CUDA's sync debug mode in the run record (docs/events.md): step events'
# device_syncs are summed into profile.sync_points (count, per step, source);
# a run whose probe said the mode is unavailable records null and that reason,
# never 0; a run without any probe report says it was not measured.
. "$(dirname "$0")/lib.sh"
cat >counted.sh <<'SH'
#!/bin/sh
e() { printf '%s\n' "$1" >&3; }
e '{"v":1,"ev":"run_start","device":"cuda:0","batch":8,"probe":"auto","sync_debug":{"state":"on","reason":null}}'
for i in 0 1 2 3; do
  e '{"v":1,"ev":"step","epoch":0,"step":'$i',"step_ms":2.0,"data_ms":0.1,"loss":null,"synced":false,"syncs":1,"device_syncs":'$((i % 2 * 4))'}'
done
SH
cat >unavailable.sh <<'SH'
#!/bin/sh
e() { printf '%s\n' "$1" >&3; }
e '{"v":1,"ev":"run_start","device":"cpu","batch":8,"probe":"auto","sync_debug":{"state":"unavailable","reason":"device cpu is not a CUDA device (sync debug mode is CUDA'"'"'s)"}}'
for i in 0 1 2; do
  e '{"v":1,"ev":"step","epoch":0,"step":'$i',"step_ms":2.0,"data_ms":0.1,"loss":null,"synced":false,"syncs":0}'
done
SH
cat >bare.sh <<'SH'
#!/bin/sh
printf '%s\n' '{"v":1,"ev":"step","epoch":0,"step":0,"step_ms":2.0,"data_ms":null,"loss":null,"synced":false}' >&3
SH
for n in counted unavailable bare; do
  expect_exit 0 "$DG" --no-ledger run --no-env --json -- sh "$n.sh"
  cp "$T/out" "$n.json"
done
expect_json counted.json 'd["profile"]["sync_points"]["device_syncs"] == 8 and d["profile"]["sync_points"]["device_syncs_per_step"] == 2.0'
expect_json counted.json 'd["profile"]["sync_points"]["device_syncs_source"].startswith("CUDA sync debug mode") and d["profile"]["sync_points"]["device_syncs_why"] is None'
expect_json counted.json 'd["profile"]["sync_points"]["host_reads"] == 4'
expect_json unavailable.json 'd["profile"]["sync_points"]["device_syncs"] is None and d["profile"]["sync_points"]["device_syncs_per_step"] is None'
expect_json unavailable.json 'd["profile"]["sync_points"]["device_syncs_source"] is None and d["profile"]["sync_points"]["device_syncs_why"].startswith("device cpu is not a CUDA device")'
expect_json bare.json 'd["profile"]["sync_points"]["device_syncs"] is None and d["profile"]["sync_points"]["device_syncs_why"].startswith("not measured")'
done_tests
