#!/usr/bin/env bash
# The hold-out split (6 examples per task at n_examples = 40) for the population certificates
# P_C / P_H (paper, Remark E.4: estimated on hold-out examples, not on the test split): the base
# model with features, run.sh's corrections replayed on it, and the report of the hold-out runs.
# Same settings as run.sh (K = 20 perturbations per example, text in the query only, bf16,
# prefix cache); run after run.sh (it uses the corrections run.sh fitted).
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
TASKS="ni065 ni069 ni1297 ni1286 ni296 ni220 ni280 ni158 ni322 ni1284"
MD='{"n_perturbations": 20, "n_examples": 40, "text_scope": "query"}'
MA=pretrained=gemma-3-270m,prefix_cache=true
HOLD=""; for t in $TASKS; do for k in format text; do HOLD="$HOLD,${t}_${k}_pert_holdout"; done; done
HOLD="${HOLD#,}"

[ -d holdout_run ] || lm_eval --model debiased_hf --model_args "$MA,collect_features=features" \
  --tasks "$HOLD" --metadata "$MD" --batch_size 16 --output_path holdout_run --log_samples
for m in ridge batch_calibration clean_calibration; do
  lm-eval-robust replay holdout_run --features features --correction "corrections_$m" \
    -o "holdout_run_$m"
done
lm-eval-robust report holdout_run holdout_run_ridge holdout_run_batch_calibration \
  holdout_run_clean_calibration --labels base,debiased,batch_cal,clean_cal -o report_holdout
