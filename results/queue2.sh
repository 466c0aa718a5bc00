#!/usr/bin/env bash
# one heavy job at a time on the 2-core CPU
cd /work/main && source .venv/bin/activate && export LM_EVAL_ROBUST_DATA_DIR=/work/shared/data
while pgrep -f "bash baselines.sh" >/dev/null; do sleep 20; done
echo "baselines done $(date)"
( cd results/gemma-3-270m_all10 && time bash holdout.sh ) > results/gemma-3-270m_all10/holdout.log 2>&1
echo "holdout done rc=$? $(date)"
( cd results/qwen2.5-coder-1.5b_ni220_all && time bash run.sh ) > results/qwen2.5-coder-1.5b_ni220_all/run.log 2>&1
echo "qwen done rc=$? $(date)"
