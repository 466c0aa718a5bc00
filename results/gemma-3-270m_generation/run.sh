#!/usr/bin/env bash
# Reduced-scale Table 4 (intermediate-layer debiasing on generation tasks) for gemma-3-270m,
# bf16 on a 2-core CPU shared with another job. Sizes and why: README.md in this folder.
# Run from the repository root:
#   nohup bash results/gemma-3-270m_generation/run.sh > results/gemma-3-270m_generation/run.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
export LM_EVAL_ROBUST_DATA_DIR=${LM_EVAL_ROBUST_DATA_DIR:-../shared/data}
export TOKENIZERS_PARALLELISM=false
OUT=results/gemma-3-270m_generation
# train: 20 examples x (clean + 4 fitting perturbations, ids 1-4); test ids 5-7
QA='{"n_examples": 44, "n_train": 20, "n_perturbations": 7, "n_fit_perturbations": 4, "n_shots": 5}'
XS='{"n_examples": 44, "n_train": 20, "n_perturbations": 7, "n_fit_perturbations": 4, "max_doc_words": 100}'
XS_EVAL='{"n_examples": 32, "n_train": 20, "n_perturbations": 7, "n_fit_perturbations": 4, "max_doc_words": 100}'
GSM='{"n_examples": 32, "n_train": 20, "n_perturbations": 7, "n_fit_perturbations": 4, "n_shots": 1}'
# task names as lm_eval takes them (robust_ namespace; this folder's runs predate it and read the same)
QA_TASKS=robust_nq_open_text_pert,robust_triviaqa_text_pert
LAYERS="0 4 9 17"   # the sweep of an 18-layer model: first, quarter, half, last

ev() {  # label group tasks metadata max_gen_toks limit [extra model args]
  # docs are round-major: --limit 2m keeps m clean prompts and the first evaluation round (id 5)
  lm_eval --model debiased_hf --model_args "pretrained=gemma-3-270m${7:-}" --tasks "$3" \
    --metadata "$4" --gen_kwargs "max_gen_toks=$5" --limit "$6" --batch_size 16 --log_samples \
    --output_path "$OUT/runs/$1_$2"
}
fit() {  # task metadata (skipped when the sweep's files exist)
  [ -f "$OUT/corrections/L17/$1.safetensors" ] && return 0
  lm-eval-robust fit --task "$1" --layer sweep --metadata "$2" --batch-size 16 \
    -o "$OUT/corrections"
}

# 1. fit every task at the swept layers
fit nq_open_text_pert "$QA"
fit triviaqa_text_pert "$QA"
fit xsum_text_pert "$XS"
fit gsm8k_text_pert "$GSM"

# 2. base and the sweep, corrections editing the last prompt token (positions=prompt, the default)
ev base qa "$QA_TASKS" "$QA" 16 48          # 24 test examples: clean + 1 perturbation
for L in $LAYERS; do ev "L$L" qa "$QA_TASKS" "$QA" 16 48 ",layer_correction=$OUT/corrections/L$L"; done
ev base xsum robust_xsum_text_pert "$XS_EVAL" 32 24  # 12 test examples: clean + 1 perturbation
for L in $LAYERS; do ev "L$L" xsum robust_xsum_text_pert "$XS_EVAL" 32 24 ",layer_correction=$OUT/corrections/L$L"; done
ev base gsm8k robust_gsm8k_text_pert "$GSM" 48 24  # 12 test examples: clean + 1 perturbation
for L in $LAYERS; do ev "L$L" gsm8k robust_gsm8k_text_pert "$GSM" 48 24 ",layer_correction=$OUT/corrections/L$L"; done

# 3. which decode positions to edit: generated tokens, or both, at layer 4 (prompt is L4 above)
for pos in generated all; do
  ev "L4-$pos" qa "$QA_TASKS" "$QA" 16 48 ",layer_correction=$OUT/corrections/L4,layer_positions=$pos"
done

python -m lm_eval_robust.report.generation.table "$OUT" | tee "$OUT/table.md"
