#!/usr/bin/env bash
# Robustness columns for lm-eval's own BIG-bench multiple-choice tasks, one model per call:
# every task as <task>_robust_format and <task>_robust_text, data read from local copies.
#
#   lm-eval-robust wrap data --bigbench ../shared/data/bigbench -o ~/lmer-data
#   scripts/wrap_leaderboard.sh gemma-3-270m runs/wrap_bb/gemma-3-270m 30 4
#   lm-eval-robust leaderboard runs/wrap_bb/* -o runs/wrap_bb_leaderboard
#
# N_EXAMPLES (a seeded sample of each task's docs) and K (perturbations per example) come from
# `lm-eval-robust plan` on a pilot run; TASKS (default: all fifteen lm-eval BIG-bench multiple-choice
# tasks of ../shared/data/bigbench) can be overridden with a comma list of BIG-bench names.
# DESIGN (default crossed) is the wrap design: crossed gives the j-th perturbation of every example
# the same format (text kind); nested lets each example draw its own, which a run at small K needs
# (crossed at K = 1 is one format and one text kind per task).
# Scores are cached in OUT.cache.* (--use_cache): a run killed part way resumes where it stopped.
set -euo pipefail
MODEL=${1:?model alias or folder}
OUT=${2:?output folder}
N=${3:-30}
K=${4:-4}
DESIGN=${DESIGN:-crossed}
DATA=${LOCAL_DATA:-$HOME/lmer-data}
ALL=causal_judgment,date_understanding,disambiguation_qa,geometric_shapes,logical_deduction,movie_recommendation,navigate,penguins_in_a_table,reasoning_about_colored_objects,ruin_names,salient_translation_error_detection,snarks,sports_understanding,temporal_sequences,tracking_shuffled_objects
TASKS=${TASKS:-$ALL}
names=""
for t in ${TASKS//,/ }; do
  for kind in format text; do
    names+="bigbench_${t}_multiple_choice_robust_${kind},"
  done
done
lm_eval --model debiased_hf --model_args "pretrained=${MODEL}" --tasks "${names%,}" \
  --metadata "{\"local_data\": \"${DATA}\", \"n_examples\": ${N}, \"n_perturbations\": ${K}, \"design\": \"${DESIGN}\"}" \
  --output_path "${OUT}" --log_samples --use_cache "${OUT}.cache"
