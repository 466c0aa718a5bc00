#!/usr/bin/env bash
# Base vs debiased gemma-3-270m on 5 binary NI tasks x {format, text}: collect train features,
# fit corrections (ridge with lambda chosen by grouped CV on train; constant offset), evaluate the
# ridge-debiased model on the test split with lm_eval. Base test numbers: ../gemma-3-270m_n10.
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
MD='{"n_perturbations": 10, "n_examples": 80}'
TASKS="ni065 ni220 ni296 ni322 ni1284"
TRAIN=""; TEST=""
for t in $TASKS; do for k in format text; do
  TRAIN="$TRAIN,${t}_${k}_pert_train"; TEST="$TEST,${t}_${k}_pert"
done; done
TRAIN="${TRAIN#,}"; TEST="${TEST#,}"

# 1. features of the train split, through the evaluation's own prompt path
lm_eval --model debiased_hf --model_args pretrained=gemma-3-270m,collect_features=features \
  --tasks "$TRAIN" --metadata "$MD" --batch_size 16 --output_path train_run

# 2. corrections
mkdir -p corrections corrections_constant plots
for t in $TASKS; do for k in format text; do
  lm-eval-robust fit --task "${t}_${k}_pert" --features "features/${t}_${k}_pert_train" \
    --lam auto -o "corrections/${t}_${k}_pert.safetensors" | tee -a fit_log.jsonl
  lm-eval-robust fit --task "${t}_${k}_pert" --features "features/${t}_${k}_pert_train" \
    --method constant --plot "plots/constant_${t}_${k}.png" \
    -o "corrections_constant/${t}_${k}_pert.safetensors" | tee -a fit_log.jsonl || true
done; done

# 3. the debiased model on the test split (raw test features kept for offline comparisons);
#    prefix_cache=false: the same computation path as the base run it is paired with
lm_eval --model debiased_hf \
  --model_args pretrained=gemma-3-270m,correction=corrections,collect_features=features,prefix_cache=false \
  --tasks "$TEST" --metadata "$MD" --batch_size 16 --output_path debiased_run --log_samples
