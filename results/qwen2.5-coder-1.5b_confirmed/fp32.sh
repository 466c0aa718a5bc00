#!/usr/bin/env bash
# The confirmation step over the base runs rescored in float32 (each folder's fp32.sh first).
set -euo pipefail
cd "$(dirname "$0")"
RUNS="../qwen2.5-coder-1.5b_ni220_all/fp32/base_run ../qwen2.5-coder-1.5b_ni1286_all/fp32/base_run
  ../qwen2.5-coder-1.5b_targets_all/fp32/base_run ../qwen2.5-coder-1.5b_chat_all/fp32/base_run"
mkdir -p fp32
# shellcheck disable=SC2086  # a list of run folders
lm-eval-robust select $RUNS -o fp32/targets.json
# shellcheck disable=SC2086
lm-eval-robust select $RUNS --significant -o fp32/targets_significant.json
