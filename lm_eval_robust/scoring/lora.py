"""LoRA adapters applied: the adapter file, its model check, and the hook that adds it.

An adapter (trained by :mod:`lm_eval_robust.scoring.lora_train`, the paper's Figure 7 baseline) is a
low-rank update on one layer's ``mlp.up_proj``, stored as one safetensors file (``lora_A [r,
in]``, ``lora_B [out, r]``, JSON metadata under ``"lm_eval_robust_lora"``) written atomically,
with the base model's fingerprint and the hash of the adapted weight: :func:`check_adapter`
refuses an adapter trained for another model. ``debiased_hf`` takes ``lora=PATH`` (a file, or a
folder of per-task files) and adds ``scaling · B A x`` to the module's output, in float32 beside
the unchanged weight (what was trained; folding it into bf16 weights would round small updates
away). Using an adapter needs nothing but torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lm_eval_robust.base.errors import UserError

__all__ = [
    "META_KEY",
    "LoraAdapter",
    "LoraError",
    "adapter_fingerprint",
    "check_adapter",
    "created_by",
    "get_module",
    "load_adapter",
    "load_adapters",
    "module_weight",
    "save_adapter",
]

META_KEY = "lm_eval_robust_lora"
SCHEMA_VERSION = 1


class LoraError(UserError):
    """An adapter, its settings or its training data that cannot be used (one line: why, fix)."""


@dataclass(eq=False)
class LoraAdapter:
    """``module(x) + scaling · (x Aᵀ) Bᵀ`` for one task; ``fingerprint`` is the base model's."""

    task: str
    module: str
    A: torch.Tensor  # [rank, in] float32
    B: torch.Tensor  # [out, rank] float32
    scaling: float
    fingerprint: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    created_by: str = ""

    @property
    def sha256(self) -> str:
        """Identity of the adapter (16 hex): its weights, scaling and target module."""
        h = hashlib.sha256()
        h.update(f"{self.module}|{self.scaling!r}|".encode())
        for t in (self.A, self.B):
            h.update(str(tuple(t.shape)).encode())
            h.update(t.detach().to(torch.float32).contiguous().cpu().numpy().tobytes())
        return h.hexdigest()[:16]

    @contextlib.contextmanager
    def attached(self, model: torch.nn.Module) -> Iterator[None]:
        """Add the adapter's output to the target module's for the duration (a forward hook)."""
        module = get_module(model, self.module)
        device = module_weight(module).device
        a = self.A.to(device=device)
        b = self.B.to(device=device)
        scaling = self.scaling

        def add(_m: torch.nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
            x = args[0].to(torch.float32)
            return (out.to(torch.float32) + scaling * ((x @ a.T) @ b.T)).to(out.dtype)

        handle = module.register_forward_hook(add)
        try:
            yield
        finally:
            handle.remove()


# --------------------------------------------------------------------------------------------
# the model side


def module_weight(module: torch.nn.Module) -> torch.Tensor:
    w = getattr(module, "weight", None)
    if not isinstance(w, torch.Tensor):
        raise LoraError(f"{type(module).__name__} has no weight matrix to adapt")
    return w


def get_module(model: torch.nn.Module, name: str) -> torch.nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise LoraError(
            f"this model has no module {name!r} that the adapter targets; it was trained for "
            "another architecture"
        ) from None


def adapter_fingerprint(model: torch.nn.Module, tokenizer: Any, module: str) -> dict[str, Any]:
    """The base model's fingerprint plus the hash of the adapted module's weight."""
    from lm_eval_robust.scoring.fingerprint import hash_tensor, model_fingerprint

    fp = model_fingerprint(model, tokenizer)
    weight = module_weight(get_module(model, module))
    fp["adapted_module"] = module
    fp["adapted_weight_sha256"] = hash_tensor(weight)
    return fp


_ADAPTER_COMPARED = (
    "architecture",
    "hidden_size",
    "vocab_size",
    "head_sha256",
    "tokenizer_sha256",
    "adapted_weight_sha256",
)


def check_adapter(adapter: LoraAdapter, model: torch.nn.Module, tokenizer: Any) -> None:
    """Raise :class:`LoraError` unless ``adapter`` was trained on this model and tokenizer."""
    have = adapter_fingerprint(model, tokenizer, adapter.module)
    want = adapter.fingerprint
    diffs = [k for k in _ADAPTER_COMPARED if k in want and want.get(k) != have.get(k)]
    if diffs:
        name = want.get("name_or_path") or want.get("architecture", "?")
        mine = have.get("name_or_path") or have.get("architecture", "?")
        raise LoraError(
            f"LoRA adapter for {adapter.task!r} was trained on {name} but this model is {mine} "
            f"(differs in {', '.join(diffs)}); train it for this model with `lm-eval-robust lora`"
        )


def created_by() -> str:
    """The package and version that writes adapters (kept in each file)."""
    from lm_eval_robust.scoring.correction import _package_version

    return _package_version()


# --------------------------------------------------------------------------------------------
# files


def save_adapter(adapter: LoraAdapter, path: str | os.PathLike[str]) -> Path:
    """Write ``adapter`` to one safetensors file atomically (temp file, fsync, rename)."""
    from safetensors.torch import save as st_save

    meta = {
        "schema": SCHEMA_VERSION,
        "task": adapter.task,
        "module": adapter.module,
        "scaling": adapter.scaling,
        "fingerprint": adapter.fingerprint,
        "settings": adapter.settings,
        "stats": adapter.stats,
        "created_by": adapter.created_by,
        "adapter_sha256": adapter.sha256,
    }
    tensors = {"lora_A": adapter.A.contiguous(), "lora_B": adapter.B.contiguous()}
    data = st_save(tensors, metadata={META_KEY: json.dumps(meta, sort_keys=True)})
    from lm_eval_robust.base.atomic import write_file
    from lm_eval_robust.scoring.correction import CorrectionError

    return write_file(data, Path(path), "the adapter", CorrectionError)


def load_adapter(path: str | os.PathLike[str]) -> LoraAdapter:
    """Read an adapter written by :func:`save_adapter` (one-line :class:`LoraError` if not)."""
    from safetensors import SafetensorError, safe_open

    p = Path(path)
    if not p.is_file():
        raise LoraError(f"LoRA adapter not found: {p}; write it with `lm-eval-robust lora`")
    try:
        with safe_open(str(p), framework="pt") as fh:
            meta_all = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise LoraError(f"{p} is not a readable safetensors adapter ({exc})") from None
    if META_KEY not in meta_all:
        raise LoraError(f"{p} is not a LoRA adapter written by `lm-eval-robust lora`")
    try:
        meta = json.loads(meta_all[META_KEY])
        adapter = LoraAdapter(
            task=str(meta["task"]),
            module=str(meta["module"]),
            A=tensors["lora_A"].to(torch.float32),
            B=tensors["lora_B"].to(torch.float32),
            scaling=float(meta["scaling"]),
            fingerprint=dict(meta["fingerprint"]),
            settings=dict(meta.get("settings") or {}),
            stats=dict(meta.get("stats") or {}),
            created_by=str(meta.get("created_by", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise LoraError(f"{p}: malformed adapter ({exc}); train it again") from None
    if int(meta.get("schema", 0)) > SCHEMA_VERSION:
        raise LoraError(f"{p} uses adapter schema {meta.get('schema')}; upgrade lm-eval-robust")
    rank = adapter.A.shape[0]
    if adapter.A.ndim != 2 or adapter.B.ndim != 2 or adapter.B.shape[1] != rank:
        raise LoraError(
            f"{p}: lora_A {tuple(adapter.A.shape)} and lora_B {tuple(adapter.B.shape)} do not "
            "form a rank-r update"
        )
    return adapter


def load_adapters(path: str | os.PathLike[str]) -> dict[str, LoraAdapter]:
    """Adapters by task from a file or a folder of ``*.safetensors`` (one per task)."""
    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    if not files:
        raise LoraError(f"no *.safetensors adapters in {p}; write them with `lm-eval-robust lora`")
    out: dict[str, LoraAdapter] = {}
    for f in files:
        adapter = load_adapter(f)
        if adapter.task in out:
            raise LoraError(f"two LoRA adapters for task {adapter.task!r} in {p}; keep one")
        out[adapter.task] = adapter
    return out
