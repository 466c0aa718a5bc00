"""The identity of a model a correction, an adapter or a feature shard belongs to.

:func:`model_fingerprint` reads it from a loaded HF causal LM (architecture, sizes, hashes of the
output layer and the tokenizer); :func:`checkpoint_fingerprint` reads the same from a checkpoint
folder's files without loading the model (``debiased_vllm``, where vLLM holds the model out of our
reach, and ``replay`` without features, with no model at all); :func:`check_model_fingerprint`
refuses a fingerprint of another model (or adapter) with a one-line
:class:`~lm_eval_robust.base.errors.CorrectionError`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lm_eval_robust.base.errors import FIT_HINT, CorrectionError

__all__ = ["check_model_fingerprint", "checkpoint_fingerprint", "hash_tensor", "model_fingerprint"]

#: fingerprint fields that identify a model (compared by :func:`check_model_fingerprint`)
_COMPARED = (
    "architecture",
    "hidden_size",
    "vocab_size",
    "head_sha256",
    "head_bias_sha256",
    "tokenizer_sha256",
)


def _sha16(h: Any) -> str:
    return str(h.hexdigest()[:16])


def hash_tensor(t: Any, rows_per_chunk: int = 4096) -> str:
    """sha256 (16 hex) of a tensor's float32 C-contiguous bytes, hashed in row chunks."""
    import torch

    if t.device.type == "meta":
        raise CorrectionError(
            "the output layer's weights are on the meta device (not loaded); load the model "
            "fully before fingerprinting it"
        )
    h = hashlib.sha256()
    x = t.detach()
    if x.ndim == 1:
        h.update(x.to(torch.float32).contiguous().cpu().numpy().tobytes())
        return _sha16(h)
    for s in range(0, x.shape[0], rows_per_chunk):
        h.update(x[s : s + rows_per_chunk].to(torch.float32).contiguous().cpu().numpy().tobytes())
    return _sha16(h)


def _tokenizer_sha(tokenizer: Any) -> str:
    vocab = tokenizer.get_vocab()
    items = sorted((str(k), int(v)) for k, v in vocab.items())
    text = json.dumps(items, ensure_ascii=False, separators=(",", ":"))
    return _sha16(hashlib.sha256(text.encode("utf-8")))


def model_fingerprint(model: Any, tokenizer: Any) -> dict[str, Any]:
    """Identity of a HF causal LM for matching corrections.

    ``architecture`` (``config.architectures[0]`` or ``model_type``), ``model_type``,
    ``name_or_path`` (informative only), ``hidden_size`` and ``vocab_size`` (from the output
    layer's weight shape), ``head_sha256`` (sha256 of ``get_output_embeddings().weight`` as float32
    C-contiguous bytes, first 16 hex), ``head_bias_sha256`` (same for its bias, or None),
    ``tokenizer_sha256`` (sha256 of the canonical JSON of the sorted ``get_vocab()`` items, first
    16 hex) and ``tokenizer_vocab_size``.
    """
    cfg = getattr(model, "config", None)
    archs = list(getattr(cfg, "architectures", None) or [])
    model_type = getattr(cfg, "model_type", None)
    head = model.get_output_embeddings()
    if head is None or getattr(head, "weight", None) is None:
        raise CorrectionError(
            f"{type(model).__name__} has no output embeddings (LM head) to fingerprint"
        )
    weight = head.weight
    vocab_rows, hidden = (int(s) for s in weight.shape)
    bias = getattr(head, "bias", None)
    vocab = tokenizer.get_vocab()
    return {
        "architecture": archs[0] if archs else (model_type or type(model).__name__),
        "model_type": model_type,
        "name_or_path": getattr(cfg, "_name_or_path", None) or None,
        "hidden_size": hidden,
        "vocab_size": vocab_rows,
        "head_sha256": hash_tensor(weight),
        "head_bias_sha256": hash_tensor(bias) if bias is not None else None,
        "tokenizer_sha256": _tokenizer_sha(tokenizer),
        "tokenizer_vocab_size": len(vocab),
    }


def _describe_model(fp: dict[str, Any]) -> str:
    name = fp.get("name_or_path") or fp.get("architecture", "?")
    head = str(fp.get("head_sha256", "?"))[:8]
    arch, hidden = fp.get("architecture", "?"), fp.get("hidden_size", "?")
    return f"{name} ({arch}, hidden {hidden}, head sha {head}…)"


def _short(v: Any) -> str:
    s = str(v)
    return (
        s[:8] + "…"
        if isinstance(v, str) and len(s) == 16 and all(ch in "0123456789abcdef" for ch in s)
        else s
    )


def check_model_fingerprint(want: dict[str, Any], fingerprint: dict[str, Any]) -> None:
    """Raise :class:`CorrectionError` if fingerprint ``want`` (a correction's) is another model's.

    Compares the identity fields (``architecture``, ``hidden_size``, ``vocab_size``,
    ``head_sha256``, ``head_bias_sha256``, ``tokenizer_sha256``); fields absent from either side
    are skipped, and a correction with none of them is refused.
    """
    compared = [k for k in _COMPARED if k in want and k in fingerprint]
    if not compared:
        raise CorrectionError(
            "correction carries no model fingerprint, so it cannot be checked against this model; "
            f"{FIT_HINT} for this model"
        )
    diffs = [k for k in compared if want[k] != fingerprint[k]]
    if diffs:
        detail = ", ".join(f"{k} {_short(want[k])} vs {_short(fingerprint[k])}" for k in diffs)
        raise CorrectionError(
            f"correction was fitted for model {_describe_model(want)} but this model is "
            f"{_describe_model(fingerprint)}: {detail}; {FIT_HINT} for this model"
        )
    # absent = no adapter (files from before LoRA support were all fitted on base models)
    mine, theirs = want.get("adapter_sha256"), fingerprint.get("adapter_sha256")
    if mine != theirs:
        raise CorrectionError(
            f"correction was fitted on {_adapter_desc(mine)} but this model is "
            f"{_adapter_desc(theirs)}; fit it with the same lora= as the run that uses it"
        )


def _adapter_desc(sha: Any) -> str:
    if sha is None:
        return "the base model (no LoRA adapter)"
    return f"the model with LoRA adapter {_short(sha) if len(str(sha)) == 16 else sha}"


def checkpoint_fingerprint(folder: str, tokenizer: Any) -> dict[str, Any]:
    """:func:`model_fingerprint` of a checkpoint folder, read from its
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
