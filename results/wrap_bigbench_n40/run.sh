#!/usr/bin/env bash
# The BIG-bench leaderboard of the four offline models at the size `plan` chose: lm-eval's own
# fifteen bigbench_<task>_multiple_choice tasks, wrapped (_robust_format, _robust_text), 40
# examples x (1 clean + 1 perturbed prompt) per task and kind, the same seeded examples for every
# model, design nested (each example draws its own format and text kind).
#
# 1. The size: `plan --budget 80` on each model's pilot (../wrap_bigbench_all15*, 16 examples x
#    K = 2, Qwen 1.5B 8): 80 prompts per task and kind are what one working session on the 2-core
#    CPU affords for the four models, and at that budget K = 1 (40 examples) detects the smallest
#    effect on every mean row and on most task rows (plan_pilot_*.md). The pilot was crossed;
#    plan's sizes assume nested draws, and a crossed run at K = 1 would measure one format and
#    one text kind per task.
# 2. The runs, one model per call, one thread per process (two runs shared the 2-core CPU). Each
#    run's score cache (OUT.cache) began as a copy of an earlier run's of the same model, whose
#    clean prompts are the same; cached scores are the scores the model gave the same prompt.
# 3. The leaderboard, the chance table and what this size detects (plan on the runs themselves).
# Run from the repository root. The runs of Gemma and the two Qwen models sit in folders of their
# own (each results folder has a 5 MB budget).
set -euo pipefail
export OMP_NUM_THREADS=1
P=results/wrap_bigbench_all15 PQ=results/wrap_bigbench_all15_qwen R=results/wrap_bigbench_n40
N=40
declare -A OUT=(
  [smollm2-135m-instruct]=$R/runs
  [gemma-3-270m]=results/wrap_bigbench_n40_gemma/runs
  [qwen2.5-coder-0.5b-instruct]=results/wrap_bigbench_n40_qwen0.5b/runs
  [qwen2.5-coder-1.5b-instruct]=results/wrap_bigbench_n40_qwen1.5b/runs
)
MODELS="smollm2-135m-instruct gemma-3-270m qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct"
lm-eval-robust wrap data --bigbench ../shared/data/bigbench -o ~/lmer-data
for m in $MODELS; do
  pilot=$P/runs/$m
  [ -d "$pilot" ] || pilot=$PQ/runs/$m
  lm-eval-robust plan "$pilot" --k 1,2,4,8,20 --effect 10 --budget $((2 * N)) \
    -o $R/plan_pilot_$m.md
done
for m in $MODELS; do
  DESIGN=nested scripts/wrap_leaderboard.sh $m ${OUT[$m]}/$m $N 1
  rm -f ${OUT[$m]}/$m.cache*
  python scripts/compress_samples.py ${OUT[$m]}/$m
done
runs=$(for m in $MODELS; do echo ${OUT[$m]}/$m; done)
lm-eval-robust leaderboard $runs -o $R/leaderboard --quiet
python scripts/wrap_chance_table.py $R/leaderboard $runs --reference qwen2.5-coder-1.5b-instruct \
  > $R/chance.md
python scripts/wrap_mean_rows.py $R/leaderboard > $R/mean_rows.md
for m in $MODELS; do
  lm-eval-robust plan ${OUT[$m]}/$m --k 1 --effect 10 --budget $((2 * N)) -o $R/plan_$m.md
done
