# The committed runs redone with float32 label scores, ties scored 1/k, both certificate
# estimators and measured radii; sourced, not run. Set TASKS (test tasks, space-separated) and
# optionally METHODS; then call fp32_redo [holdout]. Nothing is run through the model again: the
# base run recorded the LM head's input x at every label position (collect_features), so
# `lm-eval-robust replay RUN --features DIR` recomputes its label logits in float32 exactly as
# debiased_hf now does live (x @ W.T in float32; the per-prompt normaliser is the recorded one,
# shared by the labels, so no metric depends on it). The corrections are refitted on the
# rescored train features and replayed on the rescored runs. Everything goes to fp32/.
set -euo pipefail
: "${METHODS:=ridge batch_calibration clean_calibration}"
: "${LABELS:=base,debiased,batch_cal,clean_cal}"

_runs() {  # prefix -> "fp32/<prefix> fp32/<prefix>_<method> ..."
  local out="fp32/$1" m
  for m in $METHODS; do out="$out fp32/$1_$m"; done
  echo "$out"
}

fp32_redo() {
  local m t splits="base_run"
  [ "${1:-}" = holdout ] && splits="base_run holdout_run"
  rm -rf fp32
  mkdir -p fp32
  : > fp32/fit_log.jsonl
  for m in $METHODS; do
    mkdir -p "fp32/corrections_$m"
    for t in $TASKS; do
      # ridge_mean: ridge with beta = the residual mean (fit --beta mean)
      lm-eval-robust fit --task "$t" --features "features/${t}_train" \
        $([ "$m" = ridge_mean ] && echo "--method ridge --beta mean" || echo "--method $m") \
        -o "fp32/corrections_$m/$t.safetensors" >> fp32/fit_log.jsonl
    done
  done
  for s in $splits; do
    lm-eval-robust replay "$s" --features features -o "fp32/$s"
    for m in $METHODS; do
      lm-eval-robust replay "$s" --features features --correction "fp32/corrections_$m" \
        -o "fp32/${s}_$m"
    done
  done
  # shellcheck disable=SC2046  # a list of run folders
  lm-eval-robust report $(_runs base_run) --labels "$LABELS" -o fp32/report --quiet
  if [ "${1:-}" = holdout ]; then
    # shellcheck disable=SC2046
    lm-eval-robust report $(_runs holdout_run) --labels "$LABELS" -o fp32/report_holdout --quiet
  fi
}
