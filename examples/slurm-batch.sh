#!/usr/bin/env bash
# capsim on a Slurm cluster: a job array runs slices of a scenario file, a dependent job merges them.
#
#   sbatch examples/slurm-batch.sh                      # the array: slice i of 8 on task i
#   sbatch --dependency=afterok:<array job id> \
#          --wrap 'capsim merge results/shard-*.jsonl --out results/all.jsonl'
#
# Each slice is deterministic (a scenario's result depends only on its line, never on the slice or
# the thread count), so results/all.jsonl holds the bytes `capsim batch scenarios.jsonl` prints on one
# machine. The same works for `capsim sweep ... --jsonl --shard` and `capsim validate --jsonl --shard`.
#SBATCH --job-name=capsim
#SBATCH --array=0-7
#SBATCH --cpus-per-task=8
#SBATCH --mem=8G
#SBATCH --time=01:00:00
#SBATCH --output=results/slurm-%A_%a.log
set -euo pipefail
SCENARIOS=${SCENARIOS:-examples/scenarios.jsonl}
OUT=${OUT:-results}
mkdir -p "$OUT"
export RAYON_NUM_THREADS=${SLURM_CPUS_PER_TASK:-8}
capsim batch "$SCENARIOS" --shard "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT" > "$OUT/shard-$SLURM_ARRAY_TASK_ID.jsonl"
