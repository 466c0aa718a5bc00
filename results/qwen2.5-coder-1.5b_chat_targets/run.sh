#!/usr/bin/env bash
# Qwen2.5-Coder 1.5B Instruct on its chat-template targets (../qwen2.5-coder-1.5b_select/
# targets_chat.json: ni1297 and ni296, text perturbations of the query), in the chat prompt style
# (--apply_chat_template: the label is the first token of the assistant's answer): base run on
# the test split with features, corrections fitted on train features of the same style and
# replayed on the base run, the paired report. Sizes as ../qwen2.5-coder-1.5b_targets (40
# examples: 20 train / 14 test / 6 hold-out; K = 20 per test example, K = 5 per train example).
# The steps: ../protocol.sh.
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni296_text_pert ni1297_text_pert"
MD_TEST='{"n_perturbations": 20, "n_examples": 40, "text_scope": "query"}'
MD_TRAIN='{"n_perturbations": 5, "n_examples": 40, "text_scope": "query"}'
LM_EXTRA=--apply_chat_template
source ../protocol.sh
base_and_train
fit_and_replay
paired_report
