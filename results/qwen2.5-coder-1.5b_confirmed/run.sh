#!/usr/bin/env bash
# Target-task selection confirmed at full size: `select` on the full-size base runs of every task
# the 14-example screens (../qwen2.5-coder-1.5b_select) picked, in both prompt styles, read as one
# table; once with the paper's filters (clean BAC >= 70 %, drop > 1 point), once with
# --significant (the drop's whole 95 % CI beyond 1 point). Run after the full-size scripts.
set -euo pipefail
cd "$(dirname "$0")"
RUNS="../qwen2.5-coder-1.5b_ni220_all/base_run ../qwen2.5-coder-1.5b_ni1286_all/base_run
  ../qwen2.5-coder-1.5b_targets_all/base_run ../qwen2.5-coder-1.5b_chat_all/base_run"
lm-eval-robust select $RUNS -o targets.json
lm-eval-robust select $RUNS --significant -o targets_significant.json
