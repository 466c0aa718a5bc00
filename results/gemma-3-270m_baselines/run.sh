#!/usr/bin/env bash
# Six-way baselines on gemma-3-270m: base / ridge debias / batch calibration / contextual
# calibration / LoRA / LoRA + ridge debias, paired by (task, example, perturbation) in one report.
#
# Settings of ../gemma-3-270m_all10/run.sh (40 examples per task: 20 train / 14 test / 6 hold-out;
# K = 20 perturbations per test example, K = 5 per train example; text perturbations in the query
# only; shared-prefix cache on, bf16, batch 16) and its method: two real test runs (base, LoRA)
# with features, every label-logit correction replayed exactly on them (lm_eval_robust/report/replay.py,
# tests/test_replay.py). The base test run and train features are made here for this task: the
# all10 run (same settings and code) had not reached them in the time this CPU allowed.
# Task: ni065 with format perturbations (the paper's Figure 7 setting: LoRA for format
# perturbations); the shared 2-core CPU allowed LoRA training for one task (README.md).
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
TASKS="${TASKS:-ni065_format_pert}"
MD_TEST='{"n_perturbations": 20, "n_examples": 40, "text_scope": "query"}'
MD_TRAIN='{"n_perturbations": 5, "n_examples": 40, "text_scope": "query"}'
# LoRA: supervised on the same train prompts as the ridge fit (20 examples x (clean + 5) = 120)
LORA_ARGS="--rank 8 --alpha 16 --lr 2e-3 --epochs 1 --batch-size 4 --seed 0"
MA=pretrained=gemma-3-270m,prefix_cache=true
TEST=$(echo $TASKS | tr ' ' ',')
TRAIN=$(for t in $TASKS; do printf '%s_train,' "$t"; done); TRAIN="${TRAIN%,}"

# 1. LoRA adapters on layer 4 of 18 (the paper's layer 8 of 36) mlp.up_proj, one per task
#    (an adapter already in lora/ is kept: delete lora/ to retrain)
for t in $TASKS; do
  [ -f "lora/$t.safetensors" ] || lm-eval-robust lora --task "$t" --pretrained gemma-3-270m \
    --metadata "$MD_TRAIN" $LORA_ARGS -o lora | tee -a lora_log.jsonl
done

# 2. the two real test runs, with the features the corrections are replayed on
lm_eval --model debiased_hf --model_args "$MA,collect_features=features" \
  --tasks "$TEST" --metadata "$MD_TEST" --batch_size 16 --output_path base_run --log_samples
lm_eval --model debiased_hf --model_args "$MA,lora=lora,collect_features=features_lora" \
  --tasks "$TEST" --metadata "$MD_TEST" --batch_size 16 --output_path lora_run --log_samples

# 3. train features through the evaluation's prompt path: base model, and LoRA model
lm_eval --model debiased_hf --model_args "$MA,collect_features=features" \
  --tasks "$TRAIN" --metadata "$MD_TRAIN" --batch_size 16 --output_path train_run
lm_eval --model debiased_hf --model_args "$MA,lora=lora,collect_features=features_lora" \
  --tasks "$TRAIN" --metadata "$MD_TRAIN" --batch_size 16 --output_path train_run_lora

# 4. corrections: ridge (lambda by grouped CV on train) on base and on LoRA features, batch
#    calibration (mean label logits over all train prompts), contextual calibration ("N/A", "",
#    "[MASK]" as the query of the task's clean prompt)
mkdir -p corrections_debias corrections_bc corrections_cc corrections_lora_debias
: > fit_log.jsonl
for t in $TASKS; do
  lm-eval-robust fit --task "$t" --features "features/${t}_train" --lam auto \
    -o "corrections_debias/$t.safetensors" | tee -a fit_log.jsonl
  lm-eval-robust fit --task "$t" --features "features/${t}_train" --method batch_calibration \
    -o "corrections_bc/$t.safetensors" | tee -a fit_log.jsonl
  lm-eval-robust fit --task "$t" --features "features_lora/${t}_train" --lam auto \
    -o "corrections_lora_debias/$t.safetensors" | tee -a fit_log.jsonl
  lm-eval-robust fit --task "$t" --pretrained gemma-3-270m --model-args prefix_cache=true \
    --metadata "$MD_TEST" --method contextual_calibration -o "corrections_cc/$t.safetensors" \
    | tee -a fit_log.jsonl
done

# 5. each correction replayed on its model's test run
for m in debias bc cc; do
  lm-eval-robust replay base_run --features features --correction "corrections_$m" -o "${m}_run"
done
lm-eval-robust replay lora_run --features features_lora --correction corrections_lora_debias \
  -o lora_debias_run

# 6. the six-way report
lm-eval-robust report base_run debias_run bc_run cc_run lora_run lora_debias_run \
  --labels base,debias,batch_cal,contextual_cal,lora,lora_debias -o report
