"""Fold a linear correction into the output layer: a normal checkpoint that is already debiased.

``ψ(x) = [x, 1]`` makes the correction linear in the head's input, so for every label token

    row_i ← row_i − W[:n, i]        bias_i ← bias_i − (W[n, i] + β_i)

and any engine that serves the checkpoint runs the debiased model at zero cost. Tied input and
output embeddings are untied first (the input embeddings are left exactly as they were).

Most decoder heads (Llama, Gemma, Qwen...) have no bias. When the correction has a constant part,
the exported folder carries a ten-line model class that gives the head a bias, registered through
``auto_map``: load it with ``AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)``.
A correction without constant part (or a head that already has a bias) needs no custom code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lm_eval_robust.correction import (
    Correction,
    CorrectionError,
    check_fingerprint,
    load,
    merged_head_update,
    model_fingerprint,
)

REMOTE_MODULE = "modeling_lm_eval_robust"
REMOTE_CLASS = "DebiasedHeadForCausalLM"

_REMOTE_CODE = '''"""Written by `lm-eval-robust export`: {base} with a bias on its output layer."""

import torch
from transformers import {base} as _Base


class {cls}(_Base):
    def __init__(self, config):
        super().__init__(config)
        head = self.get_output_embeddings()
        biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        self.set_output_embeddings(biased)
'''


def export(pretrained: str, correction_path: str, out: str, dtype: str | None = None) -> Path:
    """Write the debiased checkpoint of ``pretrained`` to ``out``; returns ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_robust.atomic import refuse_overwrite
    from lm_eval_robust.offline_models import resolve_pretrained
    from lm_eval_robust.validate import check_correction_scale, check_dtype, check_model_folder

    check_dtype(dtype, "--dtype", CorrectionError)
    path = resolve_pretrained(pretrained)
    check_model_folder(path, CorrectionError)
    refuse_overwrite(out, "-o", [("model folder", path), ("correction", correction_path)])
    corr: Correction = load(correction_path)
    if corr.stats.get("labels_are_positions"):
        raise CorrectionError(
            f"correction for {corr.task!r} corrects option positions whose marker tokens change "
            "with the format; only corrections of fixed label tokens can be folded into the head"
        )
    kwargs: dict[str, Any] = {"dtype": _torch_dtype(dtype)} if dtype else {}
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    tok = AutoTokenizer.from_pretrained(path)
    check_fingerprint(corr, model_fingerprint(model, tok))
    head_rows = model.get_output_embeddings().weight[corr.label_token_ids]
    check_correction_scale(
        corr, head_rows.detach().float().numpy(), correction_path, CorrectionError
    )
    head: Any = model.get_output_embeddings()
    emb: Any = model.get_input_embeddings()
    with torch.no_grad():
        if head.weight.data_ptr() == emb.weight.data_ptr():  # tied: untie, keep the input side
            head.weight = torch.nn.Parameter(emb.weight.detach().clone())
        model.config.tie_word_embeddings = False
        if hasattr(model.config, "get_text_config"):
            model.config.get_text_config().tie_word_embeddings = False
        rows, bias = merged_head_update(corr, head.weight, head.bias)
        ids = torch.tensor(corr.label_token_ids, dtype=torch.long)
        head.weight[ids] = rows.to(head.weight.dtype)
        needs_bias = bool((bias != 0).any())
        base = type(model).__name__
        if head.bias is not None:
            head.bias[ids] = bias.to(head.bias.dtype)
        elif needs_bias:
            full = torch.zeros(head.out_features, dtype=head.weight.dtype)
            full[ids] = bias.to(full.dtype)
            biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
            biased = biased.to(dtype=head.weight.dtype)
            biased.weight = head.weight
            biased.bias = torch.nn.Parameter(full)
            model.set_output_embeddings(biased)
    from lm_eval_robust.atomic import atomic_dir

    with atomic_dir(out, "exported model") as target:
        _write(model, tok, target, path, correction_path, corr, needs_bias, head, base)
    return Path(out)


def _torch_dtype(name: str) -> Any:
    import torch

    return name if name == "auto" else getattr(torch, name.strip().lower())


def _write(
    model: Any,
    tok: Any,
    target: Path,
    path: str,
    correction_path: str,
    corr: Correction,
    needs_bias: bool,
    head: Any,
    base: str,
) -> None:
    """The exported folder's files, written into ``target`` (a temporary folder)."""
    model.save_pretrained(str(target))
    tok.save_pretrained(str(target))
    if head.bias is None and needs_bias:
        (target / f"{REMOTE_MODULE}.py").write_text(
            _REMOTE_CODE.format(base=base, cls=REMOTE_CLASS), encoding="utf-8"
        )
        cfg_path = target / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["architectures"] = [REMOTE_CLASS]
        cfg["auto_map"] = {"AutoModelForCausalLM": f"{REMOTE_MODULE}.{REMOTE_CLASS}"}
        cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    (target / "lm_eval_robust_export.json").write_text(
        json.dumps(
            {
                "source": str(path),
                "correction": str(correction_path),
                "task": corr.task,
                "method": corr.method,
                "label_token_ids": corr.label_token_ids,
                "needs_trust_remote_code": bool(head.bias is None and needs_bias),
            },
            indent=2,
        )
        + "\n"
    )
