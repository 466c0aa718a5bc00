"""Fold a linear correction into the output layer: a normal checkpoint that is already debiased.

``ψ(x) = [x, 1]`` makes the correction linear in the head's input, so for every label token

    row_i ← row_i − W[:n, i]        bias_i ← bias_i − (W[n, i] + β_i)

and any engine that serves the checkpoint runs the debiased model at zero cost. Tied input and
output embeddings are untied first (the input embeddings are left exactly as they were).

Most decoder heads (Llama, Gemma, Qwen...) have no bias. When the correction has a constant part,
the exported folder carries a ten-line model class that gives the head a bias, registered through
``auto_map``: load it with ``AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)``.
A correction without constant part (or a head that already has a bias) needs no custom code.

``constant="offset"`` keeps the checkpoint a stock one for engines that load only their own model
classes (vLLM): the head gets the new rows and no bias, and the constant part ``W[n] + β`` (the
part that cannot live in a bias-free head) is written beside it as a constant correction,
``lm_eval_robust/constant_part.safetensors``, fingerprinted for the exported model;
``debiased_hf`` and ``debiased_vllm`` apply it with
``correction=OUT/lm_eval_robust/constant_part.safetensors``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lm_eval_robust.scoring.correction import Correction, CorrectionError, check_fingerprint, load
from lm_eval_robust.scoring.debias import merged_head_update
from lm_eval_robust.scoring.fingerprint import model_fingerprint

REMOTE_MODULE = "modeling_lm_eval_robust"
REMOTE_CLASS = "DebiasedHeadForCausalLM"
#: a subfolder: engines (vLLM) load every top-level *.safetensors of a checkpoint as weights
CONSTANT_PART = "lm_eval_robust/constant_part.safetensors"
CONSTANT_MODES = ("bias", "offset")

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


def export(
    pretrained: str,
    correction_path: str,
    out: str,
    dtype: str | None = None,
    constant: str = "bias",
) -> Path:
    """Write the debiased checkpoint of ``pretrained`` to ``out``; returns ``out``.

    ``constant``: ``bias`` puts the constant part into a head bias (custom code where the head
    has none); ``offset`` leaves a bias-free head and writes the constant part as a constant
    correction file beside the checkpoint.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_robust.base.atomic import refuse_overwrite
    from lm_eval_robust.base.offline_models import resolve_pretrained
    from lm_eval_robust.base.validate import check_correction_scale, check_dtype, check_model_folder

    check_dtype(dtype, "--dtype", CorrectionError)
    if constant not in CONSTANT_MODES:
        raise CorrectionError(
            f"--constant {constant!r} is not one of {', '.join(CONSTANT_MODES)}; use bias (a head "
            "bias) or offset (a bias-free head and a constant correction file beside it)"
        )
    path = resolve_pretrained(pretrained)
    check_model_folder(path, CorrectionError)
    refuse_overwrite(out, "-o", [("model folder", path), ("correction", correction_path)])
    _check_previous_export(out)
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
        offset: Correction | None = None
        if head.bias is None and needs_bias and constant == "offset":
            offset = _constant_part(corr, -bias)
            needs_bias = False
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
    from lm_eval_robust.base.atomic import atomic_dir

    with atomic_dir(out, "exported model") as target:
        _write(model, tok, target, path, correction_path, corr, needs_bias, head, base)
        if offset is not None:  # after save_pretrained, which removes other *.safetensors
            from lm_eval_robust.scoring.correction import save

            offset.fingerprint = model_fingerprint(model, tok)
            (target / CONSTANT_PART).parent.mkdir(parents=True, exist_ok=True)
            save(offset, target / CONSTANT_PART)
            info_path = target / "lm_eval_robust_export.json"
            info = json.loads(info_path.read_text(encoding="utf-8"))
            info["constant_part"] = CONSTANT_PART
            info_path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return Path(out)


def _constant_part(corr: Correction, beta: Any) -> Correction:
    """The constant correction ``β' = W[n] + β`` left over when the rows alone are merged."""
    import numpy as np

    return Correction(
        method="constant_part",
        W=None,
        beta=np.asarray(beta.detach().double().cpu().numpy(), dtype=np.float64),
        label_token_ids=list(corr.label_token_ids),
        labels=list(corr.labels),
        task=corr.task,
        psi="linear",
        stats={**corr.stats, "constant_part_of": corr.method},
    )


def _check_previous_export(out: str | Path) -> None:
    """The folder ``-o`` is replaced whole: only an earlier export (it holds
    ``lm_eval_robust_export.json``) or an empty folder may be there, never other files."""
    p = Path(out)
    if not p.is_dir() or (p / "lm_eval_robust_export.json").is_file():
        return
    held = sorted(x.name for x in p.iterdir())
    if held:
        shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
        raise CorrectionError(
            f"-o {out} holds {shown}, not an earlier export; the folder is replaced whole, so "
            "choose a new or empty -o"
        )


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
                "constant_part": None,
            },
            indent=2,
        )
        + "\n"
    )
