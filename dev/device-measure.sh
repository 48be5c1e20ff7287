#!/usr/bin/env bash
# On a GPU machine: the measurement steps on cuda (sweep, soak, compare, profile).
set -u
cd "$(dirname "$0")/.."
. dev/device-env.sh
DG=build/devgate
$DG sweep --backend cuda --model cifar --from 512 --mem-budget 6G --timed-steps 10 2>&1 | tail -20
$DG soak --backend cuda --model lenet --batch 256 --epochs 5 --steps 50 --leak-per-step 4M 2>&1 | tail -14
$DG compare --backend cuda --model lenet --batches 32,256 --steps 20 2>&1 | tail -8
$DG profile --backend cuda --model cifar --batch 256 --trace "$out/trace.json" 2>&1 | tail -26
ls -la "$out"
