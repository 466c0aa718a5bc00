#!/usr/bin/env bash
# Qwen2.5-Coder 1.5B Instruct on its chat-template targets (../qwen2.5-coder-1.5b_select/
# targets_chat.json: ni1297 and ni296, text perturbations of the query), in the chat prompt style
# (--apply_chat_template: the label is the first token of the assistant's answer): base run on
# the test split with features, corrections fitted on train features of the same style and
# replayed on the base run, the paired report. Sizes as ../qwen2.5-coder-1.5b_targets (40
# examples: 20 train / 14 test / 6 hold-out; K = 20 per test example, K = 5 per train example).
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
TASKS="ni296_text_pert ni1297_text_pert"
MD_TEST='{"n_perturbations": 20, "n_examples": 40, "text_scope": "query"}'
MD_TRAIN='{"n_perturbations": 5, "n_examples": 40, "text_scope": "query"}'
MA=pretrained=qwen2.5-coder-1.5b-instruct,prefix_cache=true
TEST=$(echo $TASKS | tr ' ' ',')
TRAIN=$(for t in $TASKS; do printf '%s_train,' "$t"; done); TRAIN="${TRAIN%,}"

[ -d base_run ] || lm_eval --model debiased_hf --model_args "$MA,collect_features=features" \
  --tasks "$TEST" --metadata "$MD_TEST" --batch_size 8 --output_path base_run --log_samples \
  --apply_chat_template
[ -d train_run ] || lm_eval --model debiased_hf --model_args "$MA,collect_features=features" \
  --tasks "$TRAIN" --metadata "$MD_TRAIN" --batch_size 8 --output_path train_run \
  --apply_chat_template
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
