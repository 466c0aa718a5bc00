#!/usr/bin/env bash
# Robustness columns for lm-eval's own BIG-bench multiple-choice tasks, one model per call:
# every task as <task>_robust_format and <task>_robust_text, data read from local copies.
#
#   lm-eval-robust wrap data --bigbench ../shared/data/bigbench -o ~/lmer-data
#   scripts/wrap_leaderboard.sh gemma-3-270m runs/wrap_bb/gemma-3-270m 30 4
#   lm-eval-robust leaderboard runs/wrap_bb/* -o runs/wrap_bb_leaderboard
#
# N_EXAMPLES (a seeded sample of each task's docs) and K (perturbations per example) come from
# `lm-eval-robust plan` on a pilot run; TASKS can be overridden (comma list of BIG-bench names).
set -euo pipefail
MODEL=${1:?model alias or folder}
OUT=${2:?output folder}
N=${3:-30}
K=${4:-4}
DATA=${LOCAL_DATA:-$HOME/lmer-data}
TASKS=${TASKS:-navigate,causal_judgment,sports_understanding,snarks,geometric_shapes,penguins_in_a_table}
names=""
for t in ${TASKS//,/ }; do
  for kind in format text; do
    names+="bigbench_${t}_multiple_choice_robust_${kind},"
  done
done
lm_eval --model debiased_hf --model_args "pretrained=${MODEL}" --tasks "${names%,}" \
  --metadata "{\"local_data\": \"${DATA}\", \"n_examples\": ${N}, \"n_perturbations\": ${K}}" \
  --output_path "${OUT}" --log_samples
