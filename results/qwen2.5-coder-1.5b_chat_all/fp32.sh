#!/usr/bin/env bash
# ni1297 in the chat style (Qwen2.5-Coder 1.5B) redone with float32 label scores from the
# recorded features: ../fp32_redo.sh. Writes fp32/ (runs, corrections, report).
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni1297_text_pert"
METHODS="ridge batch_calibration clean_calibration ridge_mean"
LABELS="base,debiased,batch_cal,clean_cal,ridge_beta_mean"
source ../fp32_redo.sh
fp32_redo
