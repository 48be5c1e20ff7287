#!/usr/bin/env bash
# devgate soak: per-epoch watermarks with the cache emptied at each epoch end,
# retained references on demand (--leak-per-step) showing as allocator growth
# over the baseline, the cache kept (--no-empty-cache), validation epochs,
# the record's shape, the ledger and bad options.
. "$(dirname "$0")/lib.sh"

E=4
S=10
small=(--backend cpu --model mlp --batch 16 --threads 1 --workers 0 --epochs "$E" --steps "$S")

# Without retained references the allocator stays at its baseline. In an
# AddressSanitizer build freed memory waits in ASan's quarantine, so the
# process footprint climbs a few MiB an epoch (about the 5% a staircase step
# needs) whatever devgate does; without the quarantine it shows devgate's own
# memory again. (Other builds ignore ASAN_OPTIONS.)
ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0:thread_local_quarantine_size_kb=0" \
  expect_exit 0 "$DG" soak "${small[@]}" --json
cp out "$T/clean.json"
expect_json out "d['kind'] == 'soak' and d['status'] == 'ok'"
expect_json out "len(d['epochs']) == $E and all(e['cache_emptied'] and not e['validation'] for e in d['epochs'])"
expect_json out "abs(d['growth']['allocator_reserved']['value']) < 1 and abs(d['growth']['allocator_allocated']['value']) < 1"
expect_json out "d['baseline']['epoch'] == 0 and d['last']['epoch'] == $E - 1"
expect_json out "d['staircase']['aligned'] is None and d['empty_cache'] is True"
# Shape: per-step times with their statistics, the sampler, the trend.
expect_json out "len(d['steps']['ms']) == $E * $S and d['steps']['stats']['n'] == $E * $S - d['steps']['warmup']"
expect_json out "all(k in d['steps']['stats'] for k in ('median', 'q1', 'q3', 'iqr', 'sd', 'outliers', 'slope', 'thirds_ratio', 'noise'))"
expect_json out "d['sampler']['period_ms'] == 100 and d['sampler']['count'] >= 1 and d['sampler']['rss_peak']['valid']"
expect_json out "all(k in d['epochs'][0] for k in ('allocated', 'reserved', 'driver_used', 'rss', 'rss_peak', 'step_ms', 'samples_per_s'))"
expect_json out "d['epochs'][0]['rss']['valid'] and d['epochs'][0]['step_ms']['unit'] == 'ms'"
expect_json out "all(k in d['growth'] for k in ('allocator_reserved', 'allocator_allocated', 'driver', 'footprint'))"
expect_json out "d['step_trend']['slope']['unit'] == 'ms/step' and 'thirds_ratio' in d['step_trend']"
expect_json out "d['spec']['epochs'] == $E and d['spec']['steps'] == $S and 'loss' in d"

# 1 MiB kept alive per step: allocated grows by about epochs x steps MiB,
# and the growth over the baseline passes the 26% retained-references mark.
expect_exit 0 "$DG" soak "${small[@]}" --leak-per-step 1M --json
cp out "$T/leak.json"
expect_json out "d['epochs'][-1]['allocated']['value'] >= $E * $S * 1048576"
expect_json out "abs((d['epochs'][-1]['allocated']['value'] - d['epochs'][0]['allocated']['value']) - ($E - 1) * $S * 1048576) < 1048576"
expect_json out "d['growth']['allocator_allocated']['value'] > 26 and d['growth']['allocator_reserved']['value'] > 26"
expect_json out "d['leak_per_step'] == 1048576 and d['staircase']['allocator_allocated']['ramp'] is True"
expect_json out "d['staircase']['aligned'] is False"

# Keeping the cache: never emptied, reserved at least as high.
expect_exit 0 "$DG" soak "${small[@]}" --no-empty-cache --leak-per-step 1M --json
cp out "$T/kept.json"
expect_json out "not any(e['cache_emptied'] for e in d['epochs']) and d['empty_cache'] is False"
expect_json "$T/kept.json" "d['epochs'][-1]['reserved']['value'] >= json.load(open('$T/leak.json'))['epochs'][-1]['reserved']['value']"

# Validation steps: every epoch marked, forward passes over training batches
# without a split, over the held-out split with one.
expect_exit 0 "$DG" soak "${small[@]}" --val-steps 2 --json
expect_json out "all(e['validation'] for e in d['epochs']) and len(d['val']) == $E and all(v['batches'] == 2 for v in d['val'])"
expect_json out "d['staircase']['validation_epochs'] == list(range($E))"
expect_exit 0 "$DG" soak "${small[@]}" --val-steps 3 --val-split 0.25 --json
expect_json out "all(e['validation'] for e in d['epochs']) and all(v['batches'] == 3 for v in d['val'])"

# Human output: the per-epoch table and the growth line; the ledger has it.
expect_exit 0 "$DG" soak "${small[@]}" --leak-per-step 1M
expect_grep out 'epoch +allocated +reserved +driver +footprint +emptied +val +step ms +samples/s' "table header"
expect_grep out '^ +3 +' "last epoch row"
expect_grep out 'growth +epoch 3 over epoch 0: allocator reserved \+[0-9.]+%' "growth line"
expect_grep out 'recorded as' "ledger id"
expect_exit 0 "$DG" ledger list --json
expect_grep out '"soak"' "ledger list"

# Bad options and an unknown backend: usage; a backend not built: unavailable.
expect_exit 2 "$DG" --no-ledger soak --leak-per-step lots
expect_exit 2 "$DG" --no-ledger soak --leak-per-step 2T
expect_exit 2 "$DG" --no-ledger soak --val-steps -1
expect_exit 2 "$DG" --no-ledger soak --epochs 0
expect_exit 2 "$DG" --no-ledger soak --frobnicate
expect_grep err "soak: unknown option '--frobnicate'"
expect_exit 2 "$DG" --no-ledger soak --batch x
expect_grep err "soak: --batch wants an integer"
expect_exit 2 "$DG" --no-ledger soak --backend nosuch --steps 2 --epochs 1
if ! "$DG" --no-ledger gate --backend cuda --size 8 >/dev/null 2>&1; then
  expect_exit 3 "$DG" --no-ledger soak --backend cuda --steps 2 --epochs 1
fi

done_tests
