#!/usr/bin/env bash
# Table 4 (intermediate-layer debiasing on generation tasks) for Qwen2.5-Coder 1.5B Instruct,
# float32 on this 2-core CPU: NQ-open and TriviaQA, 1-shot, 50 train examples x (clean + 4
# fitting perturbations, ids 1-4), 80 test examples x (clean + 1 evaluation perturbation, id 5),
# no correction and the layer sweep (first, quarter, half, last of 28 decoder layers).
# Sizes and why: README.md in this folder. Run from the repository root, in the project's venv:
#   nohup bash results/qwen2.5-coder-1.5b_generation/run.sh > results/qwen2.5-coder-1.5b_generation/run.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/../.."
export LM_EVAL_ROBUST_DATA_DIR=${LM_EVAL_ROBUST_DATA_DIR:-../shared/data}
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
OUT=results/qwen2.5-coder-1.5b_generation
MODEL="pretrained=qwen2.5-coder-1.5b-instruct,dtype=float32"
META='{"n_examples": 130, "n_train": 50, "n_perturbations": 5, "n_fit_perturbations": 4, "n_shots": 1}'
# task names as lm_eval takes them (robust_ namespace; this folder's runs predate it and read the same)
TASKS=robust_nq_open_text_pert,robust_triviaqa_text_pert
LAYERS="0 7 14 27"

ev() {  # label tasks [extra model args]
  [ -d "$OUT/runs/$1" ] && return 0
  echo "== $1 start $(date -u +%T)"
  lm_eval --model debiased_hf --model_args "$MODEL${3:-}" --tasks "$2" --metadata "$META" \
    --gen_kwargs max_gen_toks=16 --batch_size 16 --log_samples --output_path "$OUT/runs/$1"
  echo "== $1 end $(date -u +%T)"
}
fit() {  # task
  [ -f "$OUT/corrections/L27/$1.safetensors" ] && return 0
  echo "== fit $1 start $(date -u +%T)"
  lm-eval-robust fit --task "$1" --pretrained qwen2.5-coder-1.5b-instruct --model_args dtype=float32 \
    --layer sweep --metadata "$META" --batch_size 16 -o "$OUT/corrections"
  echo "== fit $1 end $(date -u +%T)"
}

ev base "$TASKS"
# TriviaQA first: NQ-open sits at the floor with no drop at this size (README), so its layer runs
# can show only δ_clean
fit triviaqa_text_pert
for L in $LAYERS; do ev "L${L}_triviaqa" robust_triviaqa_text_pert ",layer_correction=$OUT/corrections/L$L"; done
fit nq_open_text_pert
for L in $LAYERS; do ev "L${L}_nq_open" robust_nq_open_text_pert ",layer_correction=$OUT/corrections/L$L"; done
python -m lm_eval_robust.report.generation.sweep "$OUT"
