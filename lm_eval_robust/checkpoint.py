"""A checkpoint folder's model fingerprint, read from its files without loading the model.

``debiased_vllm`` (vLLM holds the model out of our reach) and ``replay`` without features (no
model at all) check corrections against the folder's config, tokenizer and output-layer tensor.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lm_eval_robust.correction import CorrectionError
from lm_eval_robust.fingerprint import model_fingerprint

__all__ = ["checkpoint_fingerprint"]


def checkpoint_fingerprint(folder: str, tokenizer: Any) -> dict[str, Any]:
    """:func:`lm_eval_robust.fingerprint.model_fingerprint` of a checkpoint folder, read from its
    config and its output layer's tensor alone (tied heads read the input embeddings)."""
    from safetensors import safe_open
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(folder)
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    tied = bool(getattr(text, "tie_word_embeddings", getattr(cfg, "tie_word_embeddings", False)))
    tensors: dict[str, Any] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for key in st.keys():
                if key.endswith(("lm_head.weight", "lm_head.bias", "embed_tokens.weight")):
                    tensors[key] = st.get_tensor(key)
    head = [k for k in tensors if k.endswith("lm_head.weight")]
    emb = [k for k in tensors if k.endswith("embed_tokens.weight")]
    weight_key = (emb if tied or not head else head) or head
    if not weight_key:
        raise CorrectionError(
            f"{folder}: no lm_head.weight or embed_tokens.weight in its *.safetensors files, so "
            "corrections cannot be checked against it; give the folder that holds the model's "
            "weights"
        )
    bias = next((tensors[k] for k in tensors if k.endswith("lm_head.bias")), None)
    head_module = SimpleNamespace(weight=tensors[weight_key[0]], bias=bias)
    shim = SimpleNamespace(config=cfg, get_output_embeddings=lambda: head_module)
    return model_fingerprint(shim, tokenizer)
