#!/usr/bin/env bash
# osu_bcast's timing loop (scripts/osu_bcast_loop.c, built here with the mpicc of the mpich wheel) beside
# `gpulab bench bcast --algorithms mpi` on the same machine and ranks (docs/osu_vs_gpulab.md).
#
#     scripts/osu_bcast.sh [ranks ...]      # default: 2 4; output in ${OUT:-/tmp/osu_vs_gpulab}
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/osu_vs_gpulab}
MAX=${MAX:-1048576}
mkdir -p "$OUT"
BIN=$(dirname "$(command -v python)")
"$BIN/mpicc" -O2 -o "$OUT/osu_bcast_loop" scripts/osu_bcast_loop.c
for n in "${@:-2 4}"; do
  for p in $n; do
    echo "== $p ranks, load $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores"
    "$BIN/mpiexec" -n "$p" "$OUT/osu_bcast_loop" "$MAX" | tee "$OUT/osu_p$p.txt"
    python -m gpulab.cli bench bcast -n "$p" --algorithms mpi --sizes "1:$MAX" --time-budget 0 --quiet \
      --json "$OUT/gpulab_p$p.json" | tee "$OUT/gpulab_p$p.txt"
    python -m gpulab.cli bench bcast -n "$p" --algorithms mpi,binomial --sizes 1K --back-to-back --iters 20000 \
      --quiet --json "$OUT/gpulab_b2b_p$p.json"
  done
done
