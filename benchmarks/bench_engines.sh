#!/usr/bin/env bash
# The same perturbed task on four engines, one after another in one run on this machine:
# lm-eval's hf, debiased_hf, lm-eval's vllm and debiased_vllm, each through the lm_eval CLI.
# Wall time includes loading the model (and starting vLLM's engine); prompts/s is prompts over
# wall time, so it understates the steady rate of engines with a long start.
#
# usage (a venv with vLLM: scripts/install_vllm_cpu.sh; offline, LM_EVAL_ROBUST_DATA_DIR=DIR):
#   bash benchmarks/bench_engines.sh [OUTDIR]        (default: runs/bench_engines)
# Run it alone: lm-eval's hf engine computes full-vocabulary logits at every prompt position
# (about 8 GB at batch 16 for Gemma's 262k vocabulary), and other jobs skew the timings.
set -euo pipefail
OUT="${1:-runs/bench_engines}"
TASK="${TASK:-ni065_format_pert}"
MD="${METADATA:-}"
[ -n "$MD" ] || MD='{"n_examples": 40, "n_perturbations": 5}'
MODEL="${MODEL:-${LM_EVAL_ROBUST_CACHE:-$HOME/.cache/lm_eval_robust}/models/gemma-3-270m}"
VLLM_ARGS="dtype=float32,max_model_len=2048,gpu_memory_utilization=0.3"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
declare -A ARGS=(
  [hf]="pretrained=$MODEL,dtype=float32"
  [debiased_hf]="pretrained=$MODEL,dtype=float32"
  [vllm]="pretrained=$MODEL,$VLLM_ARGS"
  [debiased_vllm]="pretrained=$MODEL,$VLLM_ARGS"
)
echo "engine,wall_s,prompts,prompts_per_s,bac_clean,bac_pert" > "$OUT/engines.csv"
for engine in hf debiased_hf vllm debiased_vllm; do
  start=$(date +%s.%N)
  lm_eval --model "$engine" --model_args "${ARGS[$engine]}" --tasks "$TASK" --metadata "$MD" \
    --batch_size 16 --output_path "$OUT/$engine" --log_samples > "$OUT/$engine.log" 2>&1
  wall=$(python -c "import time; print(round(time.time() - $start, 1))")
  python - "$OUT/$engine" "$engine" "$wall" >> "$OUT/engines.csv" <<'PY'
import glob, gzip, json, sys
folder, engine, wall = sys.argv[1], sys.argv[2], float(sys.argv[3])
res = json.load(open(sorted(glob.glob(f"{folder}/**/results_*.json", recursive=True))[-1]))
task = next(iter(res["results"]))
n = sum(1 for f in glob.glob(f"{folder}/**/samples_*.jsonl", recursive=True) for _ in open(f))
r = res["results"][task]
print(f"{engine},{wall},{n},{n / wall:.3f},{r['robust_bac_clean,none']:.4f},{r['robust_bac_pert,none']:.4f}")
PY
  tail -1 "$OUT/engines.csv"
done
