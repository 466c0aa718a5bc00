#!/usr/bin/env bash
# GSM8K as far as this CPU allows: the base run only (no layer fit, no layer runs), 1-shot chain
# of thought, 40 test examples x (clean + 1 evaluation perturbation) = 80 generations of up to
# 256 tokens. It gives GSM8K's clean and perturbed EM with intervals and what a run costs here.
# Run from the repository root, in the project's venv:
#   nohup bash results/qwen2.5-coder-1.5b_generation/run_gsm8k.sh > results/qwen2.5-coder-1.5b_generation/run_gsm8k.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/../.."
export LM_EVAL_ROBUST_DATA_DIR=${LM_EVAL_ROBUST_DATA_DIR:-../shared/data}
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
OUT=results/qwen2.5-coder-1.5b_generation
META='{"n_examples": 90, "n_train": 50, "n_perturbations": 5, "n_fit_perturbations": 4, "n_shots": 1}'
[ -d "$OUT/runs/base_gsm8k" ] && exit 0
echo "== base_gsm8k start $(date -u +%T)"
lm_eval --model debiased_hf --model_args pretrained=qwen2.5-coder-1.5b-instruct,dtype=float32 \
  --tasks robust_gsm8k_text_pert --metadata "$META" --batch_size 16 --log_samples \
  --output_path "$OUT/runs/base_gsm8k"
echo "== base_gsm8k end $(date -u +%T)"
python -m lm_eval_robust.report.generation.sweep "$OUT"
