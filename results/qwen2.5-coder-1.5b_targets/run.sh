#!/usr/bin/env bash
# Qwen2.5-Coder 1.5B Instruct on the target tasks that `select` found in the plain prompt style
# (../qwen2.5-coder-1.5b_select/targets_plain.json: ni069, ni1286, ni1297, ni220, text kind):
# base run on the test split with features, corrections fitted on train features and replayed
# on the base run (exact for label-logit corrections), the paired report.
# Settings: 40 examples (20 train / 14 test / 6 hold-out), K = 20 text perturbations of the
# query per test example (binary-task certificates need K >= 19), K = 5 per train example,
# plain prompt style, bf16, prefix_cache=true.
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
TASKS="ni220_text_pert ni069_text_pert ni1286_text_pert ni1297_text_pert"
MD_TEST='{"n_perturbations": 20, "n_examples": 40, "text_scope": "query"}'
MD_TRAIN='{"n_perturbations": 5, "n_examples": 40, "text_scope": "query"}'
MA=pretrained=qwen2.5-coder-1.5b-instruct,prefix_cache=true
TEST=$(echo $TASKS | tr ' ' ',')
TRAIN=$(for t in $TASKS; do printf '%s_train,' "$t"; done); TRAIN="${TRAIN%,}"

lm_eval --model debiased_hf --model_args "$MA,collect_features=features" \
  --tasks "$TEST" --metadata "$MD_TEST" --batch_size 8 --output_path base_run --log_samples
lm_eval --model debiased_hf --model_args "$MA,collect_features=features" \
  --tasks "$TRAIN" --metadata "$MD_TRAIN" --batch_size 8 --output_path train_run
: > fit_log.jsonl
for m in ridge batch_calibration clean_calibration; do
  mkdir -p "corrections_$m"
  for t in $TASKS; do
    lm-eval-robust fit --task "$t" --features "features/${t}_train" --method "$m" \
      -o "corrections_$m/$t.safetensors" | tee -a fit_log.jsonl
  done
  lm-eval-robust replay base_run --features features --correction "corrections_$m" -o "run_$m"
done
lm-eval-robust report base_run run_ridge run_batch_calibration run_clean_calibration \
  --labels base,debiased,batch_cal,clean_cal -o report
