#!/usr/bin/env bash
# Target-task selection pilot for Qwen2.5-Coder 1.5B Instruct (bf16, CPU): every NI task with
# text perturbations of the query, small sizes (40 examples -> 14 test examples, K = 2), in both
# prompt styles (plain, and the model's chat template), then `lm-eval-robust select` on each.
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
MD='{"n_perturbations": 2, "n_examples": 40, "text_scope": "query"}'
MA=pretrained=qwen2.5-coder-1.5b-instruct,prefix_cache=true
# chat style: ni280 and ni322 are left out: their label words ("Profession", "Religion",
# "Threat") are not single tokens at the start of the assistant's answer for this tokenizer (they
# are with a leading space), and debiased_hf refuses such labels rather than scoring a fragment
CHAT_TASKS=ni065_text_pert,ni069_text_pert,ni1297_text_pert,ni1286_text_pert,ni296_text_pert,ni220_text_pert,ni158_text_pert,ni1284_text_pert
[ -d plain_run ] || lm_eval --model debiased_hf --model_args "$MA" --tasks ni_text_pert \
  --metadata "$MD" --batch_size 8 --output_path plain_run --log_samples
lm_eval --model debiased_hf --model_args "$MA" --tasks "$CHAT_TASKS" --metadata "$MD" \
  --batch_size 8 --output_path chat_run --log_samples --apply_chat_template
lm-eval-robust select plain_run -o targets_plain.json | tee select_plain.md
lm-eval-robust select chat_run -o targets_chat.json | tee select_chat.md
