#!/usr/bin/env bash
# The committed leaderboard: every offline model on the ni_leaderboard preset (10 NI tasks x
# {format, text}, design=crossed, text perturbations of the query), at a reduced size for this
# 2-core CPU, then `lm-eval-robust leaderboard` over the four runs.
# usage: bash results/leaderboard/run.sh [MODEL ...]   (from the repository root; default: all)
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
MD='{"n_examples": 30, "n_perturbations": 4}'
[ -z "${LB_METADATA:-}" ] || MD=$LB_METADATA
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(qwen2.5-coder-1.5b-instruct smollm2-135m-instruct gemma-3-270m qwen2.5-coder-0.5b-instruct)
# A task whose labels are not distinct single tokens for a model's tokenizer (SmolLM2 splits
# " Profession" of ni280; SmolLM2 and Qwen split the roman numeral " viii" of one crossed ni1297
# format) is refused by debiased_hf, which stops the run: scorable.py applies the same check first,
# and the leaderboard's means are over the tasks every model ran.
for m in "${MODELS[@]}"; do
  [ -d "runs/$m" ] && { echo "runs/$m exists; skipped"; continue; }
  echo "== $m $(date -u +%FT%TZ)"
  tasks=$(python scorable.py "$m" "$MD" 2>> logs/left_out.txt)
  start=$(date +%s)
  lm_eval --model debiased_hf --model_args "pretrained=$m" --tasks "$tasks" \
    --metadata "$MD" --output_path "runs/$m" --log_samples 2> "logs/$m.log"
  echo "$m: $(( $(date +%s) - start )) s" | tee -a logs/times.txt
done
lm-eval-robust leaderboard runs/smollm2-135m-instruct runs/gemma-3-270m \
  runs/qwen2.5-coder-0.5b-instruct runs/qwen2.5-coder-1.5b-instruct \
  --labels "SmolLM2 135M,Gemma 3 270M,Qwen2.5-Coder 0.5B,Qwen2.5-Coder 1.5B" -o table --quiet
# The page's screenshot (table/leaderboard_page.png): Debian's chromium, a fresh profile, no network.
if command -v chromium >/dev/null 2>&1; then
  prof=$(mktemp -d)
  chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --user-data-dir="$prof" \
    --window-size=1800,1000 --hide-scrollbars --screenshot=table/leaderboard_page.png \
    "file://$PWD/table/leaderboard.html" 2> /dev/null
  python -c "from PIL import Image; p = 'table/leaderboard_page.png'; \
Image.open(p).convert('RGB').quantize(colors=64).save(p, optimize=True)"
  rm -rf "$prof"
fi
