#!/usr/bin/env bash
# Qwen2.5-Coder 1.5B Instruct on the target tasks that `select` found in the plain prompt style
# (../qwen2.5-coder-1.5b_select/targets_plain.json: ni069, ni1286, ni1297, ni220, text kind):
# base run on the test split with features, corrections fitted on train features and replayed
# on the base run (exact for label-logit corrections), the paired report.
# Settings: 40 examples (20 train / 14 test / 6 hold-out), K = 20 text perturbations of the
# query per test example (binary-task certificates need K >= 19), K = 5 per train example,
# plain prompt style, bf16, prefix_cache=true. The steps: ../protocol.sh.
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni220_text_pert ni069_text_pert ni1286_text_pert ni1297_text_pert"
MD_TEST='{"n_perturbations": 20, "n_examples": 40, "text_scope": "query"}'
MD_TRAIN='{"n_perturbations": 5, "n_examples": 40, "text_scope": "query"}'
source ../protocol.sh
base_and_train
fit_and_replay
paired_report
