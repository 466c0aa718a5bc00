#!/usr/bin/env bash
# Qwen2.5-Coder 1.5B Instruct on its clearest target task, ni220 (text perturbations), with every
# instance the offline data holds (283: the 50/35/15 split gives 142 train / 99 test / 42
# hold-out), K = 20 perturbations of the query per test example, K = 5 per train example, plain
# prompt style, bf16, prefix_cache=true. Why these sizes: `lm-eval-robust plan` on the 14-example
# pilot (../qwen2.5-coder-1.5b_targets) puts a 1-point drop at ~3,600 examples per task, more than
# the 283 available; going from K = 20 to 200 lowers the standard error by 2 %, so compute goes to
# examples, not perturbations (README.md). The steps: ../protocol.sh.
set -euo pipefail
cd "$(dirname "$0")"
TASKS="ni220_text_pert"
source ../protocol.sh
full_protocol
