#!/usr/bin/env bash
# Qwen2.5-Coder 1.5B Instruct on its two remaining plain-style target tasks
# (../qwen2.5-coder-1.5b_select/targets_plain.json: ni069 and ni1297, text perturbations of the
# query) with every instance the offline data holds, as ../qwen2.5-coder-1.5b_ni220_all did for
# ni220: the 50/35/15 split, K = 20 perturbations per test example, K = 5 per train example, plain
# prompts, bf16, prefix_cache=true. Then the hold-out split (K = 20) for the population
# certificates, with the corrections replayed on it. Why these sizes: README.md.
# The steps: ../protocol.sh.
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni069_text_pert ni1297_text_pert"
source ../protocol.sh
full_protocol
holdout
