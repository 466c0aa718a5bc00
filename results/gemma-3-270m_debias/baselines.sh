#!/usr/bin/env bash
# Calibration baselines for the same tasks (run after run.sh): batch calibration estimated on the
# train features; contextual calibration from content-free queries in each task's clean prompt.
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
MD='{"n_perturbations": 10, "n_examples": 80}'
mkdir -p corrections_bc corrections_cc
for t in ni065 ni220 ni296 ni322 ni1284; do for k in format text; do
  lm-eval-robust fit --task "${t}_${k}_pert" --features "features/${t}_${k}_pert_train" \
    --method batch_calibration -o "corrections_bc/${t}_${k}_pert.safetensors" | tee -a fit_log.jsonl
  lm-eval-robust fit --task "${t}_${k}_pert" --pretrained gemma-3-270m --metadata "$MD" \
    --method contextual_calibration -o "corrections_cc/${t}_${k}_pert.safetensors" | tee -a fit_log.jsonl
done; done
