#!/usr/bin/env bash
# `lm-eval-robust fit --method auto` on every confirmed target of Qwen2.5-Coder 1.5B Instruct
# (../qwen2.5-coder-1.5b_confirmed/): ni220 (plain prompts), ni1297 (plain) and ni1297 (chat).
# No model pass: auto is fitted on the committed train features of each target's full-size folder,
# replayed on that folder's logged test run, and compared, paired by example, with every fixed
# correction kind replayed on the same run in float32 (the folders' fp32/ runs; the constant
# offset, which those folders did not fit, is fitted and replayed here for the binary ni220).
set -euo pipefail
cd "$(dirname "$0")"
: "${LM_EVAL_ROBUST_DATA_DIR:=../../../shared/data}"
export LM_EVAL_ROBUST_DATA_DIR
# target name, source folder, task
TARGETS="ni220_plain:../qwen2.5-coder-1.5b_ni220_all:ni220_text_pert
ni1297_plain:../qwen2.5-coder-1.5b_targets_all:ni1297_text_pert
ni1297_chat:../qwen2.5-coder-1.5b_chat_all:ni1297_text_pert"

rm -rf ni220_plain ni1297_plain ni1297_chat
: > fit_log.jsonl
for row in $TARGETS; do
  IFS=: read -r name src task <<< "$row"
  mkdir -p "$name/corrections_auto" "$name/corrections_constant"
  lm-eval-robust fit --task "$task" --features "$src/features/${task}_train" --method auto \
    -o "$name/corrections_auto/$task.safetensors" | tee -a fit_log.jsonl
  lm-eval-robust replay "$src/base_run" --features "$src/features" \
    --correction "$name/corrections_auto" -o "$name/run_auto"
  if [ "$name" = ni220_plain ]; then  # the constant offset is for binary tasks
    lm-eval-robust fit --task "$task" --features "$src/features/${task}_train" \
      --method constant -o "$name/corrections_constant/$task.safetensors" | tee -a fit_log.jsonl
    if [ -f "$name/corrections_constant/$task.safetensors" ]; then
      lm-eval-robust replay "$src/base_run" --features "$src/features" \
        --correction "$name/corrections_constant" -o "$name/run_constant"
    fi
  fi
done
python compare.py > compare.md
