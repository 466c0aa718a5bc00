#!/usr/bin/env bash
# Qwen2.5-Coder 1.5B Instruct on ni1297 (text perturbations of the query) in the chat prompt style
# (--apply_chat_template: the label is the first token of the assistant's answer), with every
# instance the offline data holds. ../qwen2.5-coder-1.5b_chat_targets found a significant drop on
# this task that ridge debiasing fitted on 20 train examples made worse; this run asks whether the
# full train split changes that. Otherwise as ../qwen2.5-coder-1.5b_ni220_all: 50/35/15 split,
# K = 20 per test example, K = 5 per train example, bf16, prefix_cache=true. No hold-out run: with
# m ≈ 40 hold-out examples P_H > 0 needs p_H above √(ln 40 / 2m) ≈ 0.19, far above the test
# split's rates. The steps: ../protocol.sh.
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni1297_text_pert"
LM_EXTRA=--apply_chat_template
source ../protocol.sh
full_protocol
beta_mean
