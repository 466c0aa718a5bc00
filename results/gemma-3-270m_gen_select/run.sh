#!/usr/bin/env bash
# λ and k of the layer-4 correction chosen by squared-error CV (`--lam auto`, k = 1, the default)
# or by held-out generation score (`--select generation`), then both evaluated on the test split
# with the base model; gemma-3-270m, TriviaQA and NQ-open, float32 on a 2-core CPU shared with
# another job. Sizes and why: README.md in this folder. Run from the repository root:
#   nohup bash results/gemma-3-270m_gen_select/run.sh > results/gemma-3-270m_gen_select/run.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/../.."
. "${VENV:-.venv}/bin/activate"
export LM_EVAL_ROBUST_DATA_DIR=${LM_EVAL_ROBUST_DATA_DIR:-../shared/data}
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one core: the other runs on this CPU keep theirs
OUT=results/gemma-3-270m_gen_select
# train: 24 examples x (clean + fitting perturbation 1); test: 16 examples, clean + perturbation 2
MD='{"n_examples": 40, "n_train": 24, "n_perturbations": 2, "n_fit_perturbations": 1, "n_shots": 3}'
GEN=max_gen_toks=8

for T in triviaqa nq_open; do
  task=${T}_text_pert
  # squared-error CV: k = 1, λ by 5-fold grouped CV of the held-out squared error (the default)
  [ -f "$OUT/corrections/mse/$task.safetensors" ] ||
    lm-eval-robust fit --task "$task" --layer 4 --metadata "$MD" --batch_size 16 \
      -o "$OUT/corrections/mse/$task.safetensors" | tee -a "$OUT/fit.jsonl"
  # generation score: k in {1, 2} x λ_rel in {1e-4, 1e-2, 1} (the default grid), 3 grouped folds
  [ -f "$OUT/corrections/generation/$task.safetensors" ] ||
    lm-eval-robust fit --task "$task" --layer 4 --select generation --gen_kwargs "$GEN" \
      --metadata "$MD" --batch_size 16 -o "$OUT/corrections/generation/$task.safetensors" |
      tee -a "$OUT/fit.jsonl"
  # test split: 16 clean prompts and their evaluation perturbation (--limit 32, round-major)
  for label in base mse generation; do
    [ -d "$OUT/runs/${label}_$T" ] && continue
    if [ "$label" = generation ] && python -c "
import sys; from lm_eval_robust.scoring.generation.fit import load_layer_correction as l
sys.exit(l(sys.argv[1]).stats['generation_selection']['chosen'] != 'none')
" "$OUT/corrections/generation/$task.safetensors"; then
      echo "$task: no correction chosen (identity file): its test run is the base run"; continue
    fi
    extra=""
    [ "$label" != base ] && extra=",layer_correction=$OUT/corrections/$label/$task.safetensors"
    lm_eval --model debiased_hf --model_args "pretrained=gemma-3-270m$extra" --tasks "$task" \
      --metadata "$MD" --gen_kwargs "$GEN" --limit 32 --batch_size 16 --log_samples \
      --output_path "$OUT/runs/${label}_$T"
  done
done
python scripts/compress_samples.py "$OUT/runs"
python "$OUT/compare.py" "$OUT" | tee "$OUT/compare.md"
