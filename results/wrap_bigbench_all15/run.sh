#!/usr/bin/env bash
# lm-eval's own BIG-bench multiple-choice tasks (all fifteen of ../shared/data/bigbench), wrapped,
# for the four offline models, then the leaderboard, the chance table, the size plan and a
# label-offset debiasing of a fixed-label task. Run from the repository root; one thread per
# process (OMP_NUM_THREADS=1) where several runs share the CPU.
set -euo pipefail
R=results/wrap_bigbench_all15
Q=results/wrap_bigbench_all15_qwen  # the Qwen runs: each results folder has a 5 MB budget
lm-eval-robust wrap data --bigbench ../shared/data/bigbench -o ~/lmer-data
for m in smollm2-135m-instruct gemma-3-270m; do
  scripts/wrap_leaderboard.sh $m $R/runs/$m 16 2
done
scripts/wrap_leaderboard.sh qwen2.5-coder-0.5b-instruct $Q/runs/qwen2.5-coder-0.5b-instruct 16 2
scripts/wrap_leaderboard.sh qwen2.5-coder-1.5b-instruct $Q/runs/qwen2.5-coder-1.5b-instruct 8 2
rm -rf $R/runs/*.cache* $Q/runs/*.cache*
python scripts/compress_samples.py $R/runs
python scripts/compress_samples.py $Q/runs
lm-eval-robust leaderboard $R/runs/smollm2-135m-instruct $R/runs/gemma-3-270m \
  $Q/runs/qwen2.5-coder-0.5b-instruct $Q/runs/qwen2.5-coder-1.5b-instruct -o $R/leaderboard --quiet
python scripts/wrap_chance_table.py $R/leaderboard $R/runs/* $Q/runs/* \
  --reference qwen2.5-coder-1.5b-instruct > $R/chance.md
lm-eval-robust plan $R/runs/gemma-3-270m --k 1,2,4,8,20 --effect 10 --budget 48 -o $R/plan.md
# debiasing a fixed-label task: fit the label offset on the train split, apply it to the test split
for split in train test; do
  lm_eval --model debiased_hf --model_args pretrained=smollm2-135m-instruct \
    --tasks bigbench_navigate_multiple_choice_robust_text_$split \
    --metadata '{"local_data": "'"$HOME"'/lmer-data", "n_examples": 60, "n_perturbations": 2}' \
    --output_path $R/debias_navigate/$split --log_samples
done
python scripts/compress_samples.py $R/debias_navigate
lm-eval-robust wrap debias $R/debias_navigate/train $R/debias_navigate/test \
  > $R/debias_navigate/debias.md
# lm-eval's own 5-shot gsm8k (generate_until), wrapped, its data read from the local copy
lm-eval-robust wrap data --gsm8k ../shared/data/gsm8k -o ~/lmer-data
lm_eval --model debiased_hf --model_args pretrained=smollm2-135m-instruct \
  --tasks gsm8k_robust_text,gsm8k_robust_format \
  --metadata '{"local_data": "'"$HOME"'/lmer-data", "n_examples": 4, "n_perturbations": 1}' \
  --output_path $R/gsm8k --log_samples
python scripts/compress_samples.py $R/gsm8k
