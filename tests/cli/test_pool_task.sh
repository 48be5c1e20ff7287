#!/usr/bin/env bash
# The task side of devgate pool (__pool_task) in a shared pool folder, run by
# hand outside Slurm (SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID set here): links
# planted before the task starts, as the job folder, the task folder or a
# file in it, are refused with a message and nothing is written through them;
# a clean folder gets its task, record, log and exit files.
. "$(dirname "$0")/lib.sh"
P=$T/pool
mkdir -p "$P" "$T/victim"
echo keep >"$T/victim/file"
TRAIN=(train --model mlp --backend cpu --threads 1 --steps 2 --batch 8)
PT() { env SLURM_ARRAY_JOB_ID="$1" SLURM_ARRAY_TASK_ID=0 "$DG" __pool_task --dir "$P" --ledger "$T/pool.db" -- "${TRAIN[@]}"; }
victim_untouched() {
  [ "$(ls -A "$T/victim")" = file ] && [ "$(cat "$T/victim/file")" = keep ] && ok ||
    bad "$1: something was written into the victim folder: $(ls -A "$T/victim")"
}

# 1. The job folder is a link to another folder.
ln -s "$T/victim" "$P/901"
expect_exit 2 PT 901
expect_grep "$T/err" 'refusing the job folder .*/901: it is a symbolic link'
victim_untouched "job folder link"

# 2. The task folder is a link.
mkdir "$P/902"
ln -s "$T/victim" "$P/902/task-0"
expect_exit 2 PT 902
expect_grep "$T/err" 'refusing the task folder .*/902/task-0: something is already there'
victim_untouched "task folder link"

# 3. The task folder exists with links to victim files in it.
mkdir -p "$P/903/task-0"
ln -s "$T/victim/file" "$P/903/task-0/task.log"
ln -s "$T/victim/file" "$P/903/task-0/record.json.part"
expect_exit 2 PT 903
expect_grep "$T/err" 'refusing the task folder'
victim_untouched "links inside the task folder"

# 4. Outside Slurm: refused.
expect_exit 2 env -u SLURM_ARRAY_JOB_ID -u SLURM_JOB_ID "$DG" __pool_task --dir "$P" -- "${TRAIN[@]}"
expect_grep "$T/err" 'not inside a Slurm job'

# 5. A clean folder: the task runs and keeps its files, the ledger's copy knows the task.
expect_exit 0 PT 904
for f in task.json record.json task.log exit.json; do
  [ -f "$P/904/task-0/$f" ] && [ ! -L "$P/904/task-0/$f" ] && ok || bad "task-0/$f missing"
done
[ ! -e "$P/904/task-0/record.json.part" ] && ok || bad "record.json.part left behind"
expect_json "$P/904/task-0/exit.json" 'd["exit_status"] == 0 and d["signal"] is None and d["cancelled"] is False'
expect_json "$P/904/task-0/record.json" 'd["kind"] == "train"'
expect_exit 0 "$DG" --ledger "$T/pool.db" ledger list --json
expect_json out 'len(d) == 1 and d[0]["verb"] == "train"'

# 6. The same task again (a planted or repeated folder): refused, the first one's files kept.
expect_exit 2 PT 904
expect_grep "$T/err" 'refusing the task folder'
expect_json "$P/904/task-0/exit.json" 'd["exit_status"] == 0'

done_tests
