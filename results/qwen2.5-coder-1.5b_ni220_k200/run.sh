#!/usr/bin/env bash
# Qwen2.5-Coder 1.5B Instruct on ni220 (text perturbations of the query) at K = 200 perturbations
# per test example, where the paper measures certificates (200 perturbations, 50/35/15 split):
# 60 examples (30 train / 21 test / 9 hold-out; the offline data hold 283: this 2-core CPU scores
# about one prompt a second), float32 label scores (debiased_hf), bf16 model, prefix cache on.
# Train split at K = 5 for the corrections. 21 x 201 = 4 221 test prompts and 30 x 6 = 180 train
# prompts: about 75 min on the 2-core CPU.
# The steps: ../protocol.sh; the report shows both certificate estimators with their checks.
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni220_text_pert"
MD_TEST='{"n_perturbations": 200, "n_examples": 60, "text_scope": "query"}'
MD_TRAIN='{"n_perturbations": 5, "n_examples": 60, "text_scope": "query"}'
source ../protocol.sh
base_and_train
fit_and_replay
paired_report
