# The paired protocol that the Qwen scripts under results/ share; sourced, not run. Set first:
#   TASKS     the test tasks, space-separated (e.g. "ni220_text_pert")
# and, where a script differs from these defaults:
#   MA        debiased_hf's --model_args (Qwen2.5-Coder 1.5B Instruct, bf16, shared-prefix cache)
#   MD_TEST   --metadata of the test and hold-out runs (every offline instance, K = 20, text
#             perturbations of the query); MD_TRAIN of the train run (the same with K = 5)
#   LM_EXTRA  extra lm_eval arguments (e.g. --apply_chat_template)
# then call the steps, in this order:
#   base_and_train    real base run on the test split (samples logged) and the train run, both
#                     collecting features; a run whose folder exists is not repeated
#   fit_and_replay    ridge (λ by grouped CV), batch calibration and the clean-calibrated offset,
#                     fitted per task on the train features and replayed on the base run
#   paired_report     the report of base vs the three corrections (report/)
#   ridge_vs_batch    ridge paired directly with batch calibration (report_ridge_vs_batch_cal/)
#   plan_tables       examples needed for a 1-point effect, this run as the pilot (plan_*.md)
#   holdout           the hold-out split with the corrections replayed, and its report
#   beta_mean         ridge refitted with β = the residual mean (fit --beta mean), replayed, and
#                     reported beside the midpoint rule and batch calibration (report_beta_mean/)
#   full_protocol     base_and_train, fit_and_replay, paired_report, ridge_vs_batch, plan_tables
# Every step runs in the calling script's folder; data from LM_EVAL_ROBUST_DATA_DIR.
set -euo pipefail
: "${LM_EVAL_ROBUST_DATA_DIR:=../../../shared/data}"
export LM_EVAL_ROBUST_DATA_DIR
LM_EXTRA="${LM_EXTRA:-}"
: "${MA:=pretrained=qwen2.5-coder-1.5b-instruct,prefix_cache=true}"
[ -n "${MD_TEST:-}" ] || MD_TEST='{"n_perturbations": 20, "n_examples": 1000, "text_scope": "query"}'
[ -n "${MD_TRAIN:-}" ] || MD_TRAIN='{"n_perturbations": 5, "n_examples": 1000, "text_scope": "query"}'
METHODS="ridge batch_calibration clean_calibration"
LABELS="base,debiased,batch_cal,clean_cal"

_split() {  # "a b" suffix -> "a<suffix>,b<suffix>"
  local out="" t
  for t in $TASKS; do out="$out,$t$1"; done
  echo "${out#,}"
}

_lm_eval() {  # folder tasks metadata [more lm_eval arguments]
  local folder=$1 tasks=$2 md=$3
  shift 3
  [ -d "$folder" ] && return 0
  # shellcheck disable=SC2086  # LM_EXTRA is a list of arguments
  lm_eval --model debiased_hf --model_args "$MA,collect_features=features" --tasks "$tasks" \
    --metadata "$md" --batch_size "${BATCH:-8}" --output_path "$folder" "$@" $LM_EXTRA
}

base_and_train() {
  _lm_eval base_run "$(_split "")" "$MD_TEST" --log_samples
  _lm_eval train_run "$(_split _train)" "$MD_TRAIN"
}

fit_and_replay() {
  local m t
  : > fit_log.jsonl
  for m in $METHODS; do
    mkdir -p "corrections_$m"
    for t in $TASKS; do
      lm-eval-robust fit --task "$t" --features "features/${t}_train" --method "$m" \
        -o "corrections_$m/$t.safetensors" | tee -a fit_log.jsonl
    done
    lm-eval-robust replay base_run --features features --correction "corrections_$m" -o "run_$m"
  done
}

paired_report() {
  lm-eval-robust report base_run run_ridge run_batch_calibration run_clean_calibration \
    --labels "$LABELS" -o report
}

ridge_vs_batch() {
  lm-eval-robust report run_ridge run_batch_calibration --labels debiased,batch_cal \
    -o report_ridge_vs_batch_cal
}

plan_tables() {
  lm-eval-robust plan base_run -o plan_drop.md
  lm-eval-robust plan base_run run_ridge -o plan_debias.md
}

holdout() {
  local m
  _lm_eval holdout_run "$(_split _holdout)" "$MD_TEST" --log_samples
  for m in $METHODS; do
    lm-eval-robust replay holdout_run --features features --correction "corrections_$m" \
      -o "holdout_run_$m"
  done
  lm-eval-robust report holdout_run holdout_run_ridge holdout_run_batch_calibration \
    holdout_run_clean_calibration --labels "$LABELS" -o report_holdout
}

beta_mean() {  # ridge with β = the residual mean (fit --beta mean), beside the paper's midpoint
  local t
  mkdir -p corrections_ridge_mean
  : > fit_log_beta_mean.jsonl
  for t in $TASKS; do
    lm-eval-robust fit --task "$t" --features "features/${t}_train" --method ridge --beta mean \
      -o "corrections_ridge_mean/$t.safetensors" | tee -a fit_log_beta_mean.jsonl
  done
  lm-eval-robust replay base_run --features features --correction corrections_ridge_mean \
    -o run_ridge_mean
  lm-eval-robust report base_run run_ridge run_ridge_mean run_batch_calibration \
    --labels base,ridge_midpoint,ridge_mean,batch_cal -o report_beta_mean
}

full_protocol() {  # the full-size runs' steps, in order
  base_and_train
  fit_and_replay
  paired_report
  ridge_vs_batch
  plan_tables
}
