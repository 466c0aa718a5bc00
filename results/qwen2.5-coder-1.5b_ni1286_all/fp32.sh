#!/usr/bin/env bash
# ni1286 (Qwen2.5-Coder 1.5B) redone with float32 label scores from the recorded features:
# ../fp32_redo.sh. Writes fp32/ (runs, corrections, report).
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni1286_text_pert"
source ../fp32_redo.sh
fp32_redo
