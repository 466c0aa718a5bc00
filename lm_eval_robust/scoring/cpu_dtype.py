"""The dtype ``debiased_hf`` and ``debiased_vllm`` load a checkpoint in when ``dtype`` is auto.

Half-precision checkpoints run several times slower on a CPU that emulates bfloat16; there they
are loaded in float32 (the label scores are float32 either way).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = ["checkpoint_dtype", "cpu_dtype_default", "cpu_has_native_bf16"]


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX), as oneDNN reports."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def checkpoint_dtype(folder: str) -> str:
    """The dtype a local checkpoint's config.json records (empty when unknown)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    text = config.get("torch_dtype") or config.get("dtype") or ""
    if not text and isinstance(config.get("text_config"), dict):
        text = config["text_config"].get("torch_dtype") or config["text_config"].get("dtype") or ""
    return str(text)


def cpu_dtype_default(pretrained: str, kwargs: Mapping[str, Any]) -> str | None:
    """``float32`` where the user left ``dtype`` at auto, the model runs on a CPU without native
    bfloat16, and the local checkpoint is stored in half precision (emulated half precision is
    several times slower there; the label scores are float32 either way); else None."""
    if str(kwargs.get("dtype", "auto")).lower() != "auto" or "torch_dtype" in kwargs:
        return None
    device = str(kwargs.get("device") or "cuda").lower()
    on_cpu = device.startswith("cpu") or (
        device.startswith("cuda") and not torch.cuda.is_available()
    )
    if not on_cpu or cpu_has_native_bf16():
        return None
    if checkpoint_dtype(pretrained) in ("bfloat16", "float16"):
        return "float32"
    return None
