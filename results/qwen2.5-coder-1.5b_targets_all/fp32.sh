#!/usr/bin/env bash
# ni069 and ni1297 (Qwen2.5-Coder 1.5B) redone with float32 label scores from the recorded
# features: ../fp32_redo.sh. Writes fp32/ (runs, corrections, report, report_holdout).
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni069_text_pert ni1297_text_pert"
METHODS="ridge batch_calibration clean_calibration ridge_mean"
LABELS="base,debiased,batch_cal,clean_cal,ridge_beta_mean"
source ../fp32_redo.sh
fp32_redo holdout
