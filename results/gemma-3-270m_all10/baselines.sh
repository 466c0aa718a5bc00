#!/usr/bin/env bash
# Six-way baselines on the committed all-10-task run (run.sh first): base / ridge debias / batch
# calibration / contextual calibration / LoRA / LoRA + ridge debias (+ the clean-calibrated
# reference), every run paired with base by (task, example, perturbation) in one report.
# Reuses run.sh's base test run, its train features and its ridge and batch-calibration
# corrections; adds contextual calibration, one LoRA adapter per task, the LoRA model's real test
# run and train features, ridge on the LoRA features, and the report. Same settings as run.sh.
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
TASKS="ni065 ni069 ni1297 ni1286 ni296 ni220 ni280 ni158 ni322 ni1284"
MD_TEST='{"n_perturbations": 20, "n_examples": 40, "text_scope": "query"}'
MD_TRAIN='{"n_perturbations": 5, "n_examples": 40, "text_scope": "query"}'
# LoRA as in ../gemma-3-270m_baselines: layer 4 of 18 mlp.up_proj, supervised on the same train
# prompts as the ridge fit (20 examples x (clean + 5 perturbations) = 120 per task)
LORA_ARGS="--rank 8 --alpha 16 --lr 2e-3 --epochs 1 --batch-size 4 --seed 0"
MA=pretrained=gemma-3-270m,prefix_cache=true
KEYS=""; for t in $TASKS; do for k in format text; do KEYS="$KEYS ${t}_${k}_pert"; done; done
TEST=$(echo $KEYS | tr ' ' ',')
TRAIN=$(for t in $KEYS; do printf '%s_train,' "$t"; done); TRAIN="${TRAIN%,}"

# 1. LoRA adapters, one per task (adapters already in lora/ are kept: delete lora/ to retrain)
MISSING=$(for t in $KEYS; do [ -f "lora/$t.safetensors" ] || printf '%s,' "$t"; done)
MISSING="${MISSING%,}"
[ -z "$MISSING" ] || lm-eval-robust lora --task "$MISSING" --pretrained gemma-3-270m \
  --metadata "$MD_TRAIN" $LORA_ARGS -o lora | tee -a lora_log.jsonl

# 2. the LoRA model's real test run and train features
[ -d lora_run ] || lm_eval --model debiased_hf --model_args "$MA,lora=lora,collect_features=features_lora" \
  --tasks "$TEST" --metadata "$MD_TEST" --batch_size 16 --output_path lora_run --log_samples
[ -d train_run_lora ] || lm_eval --model debiased_hf \
  --model_args "$MA,lora=lora,collect_features=features_lora" \
  --tasks "$TRAIN" --metadata "$MD_TRAIN" --batch_size 16 --output_path train_run_lora

# 3. contextual calibration ("N/A", "", "[MASK]" as the query of each task's clean prompt) and
#    ridge on the LoRA model's train features
mkdir -p corrections_contextual_calibration corrections_lora_ridge
: > fit_log_baselines.jsonl
for t in $KEYS; do
  lm-eval-robust fit --task "$t" --pretrained gemma-3-270m --model-args prefix_cache=true \
    --metadata "$MD_TEST" --method contextual_calibration \
    -o "corrections_contextual_calibration/$t.safetensors" | tee -a fit_log_baselines.jsonl
  lm-eval-robust fit --task "$t" --features "features_lora/${t}_train" \
    -o "corrections_lora_ridge/$t.safetensors" | tee -a fit_log_baselines.jsonl \
    || echo "{\"task\": \"$t\", \"method\": \"lora_ridge\", \"failed\": true}" \
    | tee -a fit_log_baselines.jsonl
done

# 4. replays: contextual calibration on the base run, ridge on the LoRA run
lm-eval-robust replay base_run --features features \
  --correction corrections_contextual_calibration -o run_contextual_calibration
lm-eval-robust replay lora_run --features features_lora --correction corrections_lora_ridge \
  -o run_lora_ridge

# 5. the side-by-side report
lm-eval-robust report base_run run_ridge run_batch_calibration run_contextual_calibration \
  lora_run run_lora_ridge run_clean_calibration \
  --labels base,debias,batch_cal,contextual_cal,lora,lora_debias,clean_cal -o report_baselines
