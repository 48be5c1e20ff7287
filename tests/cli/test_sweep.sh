#!/usr/bin/env bash
# devgate sweep: trials in child processes, the knee and the safe batch, the
# memory-budget stop with bisection, an injected crash and an injected hang
# (each ends its trial only), --no-bisect, the record's shape, exit statuses.
# cpu, one thread, mlp, few steps: the whole file stays well under a minute.
. "$(dirname "$0")/lib.sh"
S=(--threads 1 --model mlp --warmup-steps 2 --timed-steps 4)

# A short sweep up to --to completes with a knee and a safe batch.
expect_exit 0 "$DG" --no-ledger sweep "${S[@]}" --to 32 --json
cp out "$T/limit.json"
expect_json out 'd["kind"] == "sweep" and d["v"] == 1 and [t["batch"] for t in d["trials"]] == [8, 16, 32]'
expect_json out 'all(t["ended"] == "ok" for t in d["trials"]) and d["stopped"]["reason"] in ("limit", "throughput-falling")'
expect_json out 'd["knee"]["batch"] in (8, 16, 32) and d["knee"]["samples_per_s"]["valid"] and d["knee"]["samples_per_s"]["value"] > 0'
expect_json out 'd["safe_batch"]["batch"] == 32 and d["safe_batch"]["note"] == "no failure reached" and d["safe_batch"]["first_failure"] is None'
expect_json out 'd["bisect"] == [] and d["good_trials"] == 3'
# Record shape: every trial member, metrics as {value, unit, valid}, null when not reported.
expect_json out '(lambda m: all(all(k in t for k in ("batch", "ended", "reason", "samples_per_s", "step_ms", "device_allocated_peak", "device_reserved_peak", "rss_peak", "swap_growth", "psi_peak", "wall_s")) and all(m(t[k]) for k in ("samples_per_s", "device_allocated_peak", "device_reserved_peak", "rss_peak", "swap_growth", "psi_peak", "wall_s")) and m(t["step_ms"]["median"]) and m(t["step_ms"]["iqr"]) for t in d["trials"]))(lambda x: set(x) == {"value", "unit", "valid"} and (x["valid"] or x["value"] is None))'
expect_json out 'all(t["step_ms"]["source"] == "steps" and t["step_ms"]["steps"] == 4 and t["step_ms"]["median"]["valid"] for t in d["trials"])'
expect_json out 'all(t["device_reserved_peak"]["valid"] and t["device_reserved_peak"]["value"] > 0 for t in d["trials"])'
expect_json out 'all(k in d for k in ("spec", "trials", "stopped", "bisect", "knee", "safe_batch", "host", "timestamp"))'
expect_json out 'd["spec"]["mem_budget"]["valid"] and d["spec"]["mem_budget_source"].startswith("90%") and d["spec"]["sync_every"] == 1'

# Human output: the table and the knee/safe lines.
expect_exit 0 "$DG" --no-ledger sweep "${S[@]}" --to 16
expect_grep out '^ +batch +ended +samples/s'
expect_grep out '^ +16 +ok '
expect_grep out 'knee +batch (8|16):'
expect_grep out 'safe +batch 16 \(no failure reached\)'

# A small memory budget: a trial ends device-oom, the sweep stops there,
# bisects, and the safe batch sits 5% under the first failure. From 64 (mlp
# needs about 7.4 MiB there, more than 8 MiB at 128) so two doubling trials
# reach the budget and noise on a busy machine cannot stop it as "throughput-falling".
expect_exit 0 "$DG" --no-ledger sweep "${S[@]}" --from 64 --mem-budget 8M --json
cp out "$T/budget.json"
expect_json out 'd["stopped"]["reason"] in ("budget", "oom") and d["trials"][-1]["ended"] == "device-oom" and d["stopped"]["at_batch"] == d["trials"][-1]["batch"]'
expect_json out 'd["trials"][-1]["budget"] is True and d["stopped"]["reason"] == "budget"'
expect_json out 'len(d["bisect"]) >= 1 and all(b["batch"] > d["trials"][-2]["batch"] and b["batch"] < d["trials"][-1]["batch"] for b in d["bisect"])'
expect_json out 'd["safe_batch"]["batch"] is not None and d["safe_batch"]["batch"] <= 0.95 * d["safe_batch"]["first_failure"] and d["safe_batch"]["first_failure"] <= d["stopped"]["at_batch"]'
expect_json out '(lambda g, f: f - g <= max(1, d["trials"][-2]["batch"] // 8))(max(t["batch"] for t in d["trials"] + d["bisect"] if t["ended"] == "ok"), d["safe_batch"]["first_failure"])'
expect_json out 'd["spec"]["mem_budget"]["value"] == 8 * 1048576 and d["spec"]["mem_budget_source"] == "option"'
expect_json out 'not d["trials"][-1]["samples_per_s"]["valid"] and d["trials"][-1]["samples_per_s"]["value"] is None'

# --no-bisect skips bisection.
expect_exit 0 "$DG" --no-ledger sweep "${S[@]}" --from 64 --mem-budget 8M --no-bisect --json
expect_json out 'd["bisect"] == [] and d["spec"]["bisect"] is False and d["stopped"]["reason"] == "budget"'
expect_json out 'd["safe_batch"]["batch"] <= 0.95 * d["stopped"]["at_batch"]'

# An injected crash ends that trial with SIGSEGV; the parent survives and records it.
DEVGATE_FAULT=trial-crash@16 expect_exit 0 "$DG" --no-ledger sweep "${S[@]}" --to 64 --json
expect_json out '[t["batch"] for t in d["trials"]] == [8, 16] and d["trials"][1]["ended"] == "signal" and d["trials"][1]["signal"] == "SIGSEGV"'
expect_json out 'd["stopped"] == {"reason": "signal", "at_batch": 16} and d["safe_batch"]["batch"] == 15 and d["safe_batch"]["first_failure"] == 16'
expect_json out '[b["batch"] for b in d["bisect"]] == [12, 14, 15] and all(b["ended"] == "ok" for b in d["bisect"])'
DEVGATE_FAULT=trial-crash@16 expect_exit 0 "$DG" --no-ledger sweep "${S[@]}" --to 64 --no-bisect
expect_grep out '^ +16 +signal SIGSEGV'
expect_grep out 'stopped +signal at batch 16'
expect_grep out 'safe +batch 8 \(5% under the first failure at 16\)'

# An injected hang is killed at --trial-timeout; no trial process is left behind.
seed=$((RANDOM + 70000))
start=$(date +%s)
DEVGATE_FAULT=trial-hang@16 DG_TEST_MARK="$seed" expect_exit 0 "$DG" --no-ledger sweep "${S[@]}" --to 64 \
  --no-bisect --trial-timeout 2 --seed "$seed" --json
elapsed=$(($(date +%s) - start))
expect_json out 'd["trials"][1]["ended"] == "timeout" and d["stopped"]["reason"] == "timeout" and d["trials"][1]["wall_s"]["value"] >= 1.9'
if [ "$elapsed" -lt 30 ]; then ok; else bad "hanging trial took ${elapsed}s to end"; fi
left=0
for p in /proc/[0-9]*; do
  if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "__trial " &&
    { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qx "DG_TEST_MARK=$seed"; then left=1; fi
done
if [ "$left" -eq 0 ]; then ok; else bad "a hanging trial process is still alive"; fi

# No trial succeeded: exit 1, still a record.
DEVGATE_FAULT=trial-crash@8 expect_exit 1 "$DG" --no-ledger sweep "${S[@]}" --to 8 --json
expect_json out 'd["good_trials"] == 0 and d["knee"]["batch"] is None and d["safe_batch"]["batch"] is None'

# The ledger keeps the sweep under verb "sweep".
expect_exit 0 "$DG" sweep "${S[@]}" --to 8
expect_exit 0 "$DG" ledger list --json
expect_json out 'any(r.get("verb") == "sweep" for r in d)'

# The child verb without its spec or result fd is a usage error; it takes no train flags.
expect_exit 2 "$DG" --no-ledger __trial --result-fd 3
expect_exit 2 "$DG" --no-ledger __trial --spec-fd 0
expect_exit 2 "$DG" --no-ledger __trial --batch 8 --spec-fd 0 --result-fd 3

# Backend not available: exit 3 (only where cuda is absent).
if ! "$DG" --no-ledger gate --backend cuda --size 8 >/dev/null 2>&1; then
  expect_exit 3 "$DG" --no-ledger sweep --backend cuda --to 8
fi

# Bad options: exit 2.
expect_exit 2 "$DG" --no-ledger sweep --from 0
expect_exit 2 "$DG" --no-ledger sweep --from 64 --to 8
expect_exit 2 "$DG" --no-ledger sweep --batch 8
expect_exit 2 "$DG" --no-ledger sweep --steps 8
expect_exit 2 "$DG" --no-ledger sweep --trial-timeout -1
expect_exit 2 "$DG" --no-ledger sweep --timed-steps x
expect_exit 2 "$DG" --no-ledger sweep --mem-budget lots
expect_exit 2 "$DG" --no-ledger sweep --bogus
expect_exit 2 "$DG" --no-ledger sweep --backend nosuch

done_tests
