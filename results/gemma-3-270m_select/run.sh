#!/usr/bin/env bash
# Target-task screen for Gemma 3 270M with one command: `select --pretrained` runs the pass itself
# (every NI task, format and text kinds, 40 examples -> 14 test examples, 2 perturbations each,
# plain prompts, bf16, prefix cache) into select_run/, then applies the paper's filters.
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
lm-eval-robust select --pretrained gemma-3-270m --model_args prefix_cache=true --batch_size 16 \
  -o targets.json
