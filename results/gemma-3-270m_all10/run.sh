#!/usr/bin/env bash
# gemma-3-270m on all 10 NI tasks x {format, text}: base run on the test split with features,
# corrections fitted on train features, each replayed on the base run (exact for label-logit
# corrections: see lm_eval_robust/report/replay.py and tests/test_replay.py), then the paired report.
# Settings: 40 examples per task (20 train / 14 test / 6 hold-out: what a 2-core CPU shared with
# other work finishes in about half an hour); K = 20 perturbations per test example (enough for
# binary-task certificates: eps_B = 1/(n+1) < phi needs K >= 19), K = 5 per train example; text perturbations in the query only (text_scope=query) so the
# shared-prefix cache applies; prefix_cache=true (bf16) in every pass.
set -euo pipefail
cd "$(dirname "$0")"
export LM_EVAL_ROBUST_DATA_DIR="${LM_EVAL_ROBUST_DATA_DIR:-../../../shared/data}"
TASKS="ni065 ni069 ni1297 ni1286 ni296 ni220 ni280 ni158 ni322 ni1284"
BINARY="ni065 ni069 ni296 ni220 ni322 ni1284"
MD_TEST='{"n_perturbations": 20, "n_examples": 40, "text_scope": "query"}'
MD_TRAIN='{"n_perturbations": 5, "n_examples": 40, "text_scope": "query"}'
MA=pretrained=gemma-3-270m,prefix_cache=true
TRAIN=""; TEST=""
for t in $TASKS; do for k in format text; do
  TRAIN="$TRAIN,${t}_${k}_pert_train"; TEST="$TEST,${t}_${k}_pert"
done; done
TRAIN="${TRAIN#,}"; TEST="${TEST#,}"

# 1. base model on the test split, with the features every correction is replayed on
[ -d base_run ] || lm_eval --model debiased_hf --model_args "$MA,collect_features=features" \
  --tasks "$TEST" --metadata "$MD_TEST" --batch_size 16 --output_path base_run --log_samples

# 2. features of the train split, through the evaluation's own prompt path
lm_eval --model debiased_hf --model_args "$MA,collect_features=features" \
  --tasks "$TRAIN" --metadata "$MD_TRAIN" --batch_size 16 --output_path train_run

# 3. corrections from the train features: ridge (lambda by grouped CV), batch calibration,
#    the clean-calibrated reference, and the constant offset (binary tasks)
: > fit_log.jsonl
for m in ridge batch_calibration clean_calibration; do
  mkdir -p "corrections_$m"
  for t in $TASKS; do for k in format text; do
    lm-eval-robust fit --task "${t}_${k}_pert" --features "features/${t}_${k}_pert_train" \
      --method "$m" -o "corrections_$m/${t}_${k}_pert.safetensors" | tee -a fit_log.jsonl \
      || echo "{\"task\": \"${t}_${k}_pert\", \"method\": \"$m\", \"failed\": true}" | tee -a fit_log.jsonl
  done; done
done

# 4. each correction replayed on the base run
for m in ridge batch_calibration clean_calibration; do
  lm-eval-robust replay base_run --features features --correction "corrections_$m" -o "run_$m"
done

# 5. the paired report (every run paired with base by task, example and perturbation)
lm-eval-robust report base_run run_ridge run_batch_calibration run_clean_calibration \
  --labels base,debiased,batch_cal,clean_cal -o report
