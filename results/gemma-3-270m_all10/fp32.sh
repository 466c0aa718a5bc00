#!/usr/bin/env bash
# All 10 tasks x {format, text} (Gemma 3 270M) redone with float32 label scores from the
# recorded features: ../fp32_redo.sh. Writes fp32/ (runs, corrections, report, report_holdout).
set -euo pipefail
cd "$(dirname "$0")"
TASKS=""
for t in ni065 ni069 ni1297 ni1286 ni296 ni220 ni280 ni158 ni322 ni1284; do
  TASKS="$TASKS ${t}_format_pert ${t}_text_pert"
done
source ../fp32_redo.sh
fp32_redo holdout
