"""``lm-eval-robust fit --task <name>_text_pert --layer L|a,b|sweep``: the intermediate-layer fit.

Builds the ``_train`` docs (clean prompts and fitting perturbations), encodes them as the
harness's ``generate_until`` does (``tok_batch_encode``, left truncation to ``max_length −
max_gen_toks``), collects the last prompt token's state at every requested layer in one pass,
fits one correction per layer and writes it. One layer: ``-o FILE.safetensors`` (or a folder,
holding ``<task>.safetensors``); several: ``-o DIR`` gets ``DIR/L<layer>/<task>.safetensors``,
so ``layer_correction=DIR/L<layer>`` applies one layer to every task fitted there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lm_eval_robust.errors import UserError

SUFFIX = "_text_pert"


def gen_task_of(key: str) -> str:
    """``nq_open_text_pert`` -> ``nq_open``; a one-line error for anything else."""
    from lm_eval_robust.generation.tasks import GEN_TASKS

    name = key[: -len(SUFFIX)] if key.endswith(SUFFIX) else ""
    if name not in GEN_TASKS:
        names = ", ".join(f"{n}{SUFFIX}" for n in GEN_TASKS)
        raise UserError(f"--layer fits generation tasks ({names}), not {key!r}; pick one of them")
    return name


def _out_path(out: Path, key: str, layer: int, several: bool) -> Path:
    if several:
        return out / f"L{layer}" / f"{key}.safetensors"
    if out.suffix == ".safetensors":
        return out
    return out / f"{key}.safetensors"


def fit_layers(args: argparse.Namespace, key: str) -> int:
    """Run the layer fit described by the parsed ``fit`` arguments."""
    from lm_eval_robust.cli.args import model_kwargs, number_or_auto, parse_metadata
    from lm_eval_robust.generation.fit import fit_layer_correction, save_layer_correction
    from lm_eval_robust.generation.layers import (
        POSITIONS,
        collect_last_states,
        decoder_layers,
        encode_prompts,
        resolve_layers,
    )
    from lm_eval_robust.generation.tasks import GenConfig, build_docs, get_task
    from lm_eval_robust.model import DebiasedHFLM

    name = gen_task_of(key)
    if args.method != "ridge":
        raise UserError(f"--layer fits the ridge only, not --method {args.method}; drop --method")
    if args.positions not in POSITIONS:
        raise UserError(f"--positions must be one of {', '.join(POSITIONS)}")
    if args.k < 1:
        raise UserError(f"--k must be >= 1, got {args.k}")
    lam = number_or_auto("--lam", args.lam, minimum=0.0)
    alpha = number_or_auto("--alpha", args.alpha, minimum=0.0)
    if alpha is None:
        raise UserError("--alpha auto is for classification fits; give a number for --layer")
    config = GenConfig.from_metadata(parse_metadata(args.metadata))
    docs = build_docs(name, "text", "train", config)
    out = Path(args.out)
    lm = DebiasedHFLM(pretrained=args.pretrained, **model_kwargs(args.model_args))
    n_layers = len(decoder_layers(lm.model))
    layers = resolve_layers(args.layer, n_layers)
    tokens = encode_prompts(lm, [d["prompt"] for d in docs], get_task(name).max_gen_toks)
    pad = lm.tokenizer.pad_token_id
    bs = int(args.batch_size) if str(args.batch_size).isdigit() else 8
    states = collect_last_states(
        lm.model,
        tokens,
        layers,
        pad_id=int(pad if pad is not None else 0),
        batch_size=bs,
        desc=f"{key}_train: layer states",
    )
    clean_row = {d["example_id"]: i for i, d in enumerate(docs) if d["pert_id"] == 0}
    pert = [i for i, d in enumerate(docs) if d["pert_id"] != 0]
    clean = sorted(clean_row.values())
    pos_of = {row: j for j, row in enumerate(clean)}
    pair = [pos_of[clean_row[docs[i]["example_id"]]] for i in pert]
    groups = [str(docs[i]["example_id"]) for i in pert]
    for layer in layers:
        x = states[layer]
        corr = fit_layer_correction(
            x[np.asarray(clean)],
            x[np.asarray(pert)],
            pair,
            groups,
            layer=layer,
            num_layers=n_layers,
            task=key,
            k=args.k,
            lam=lam,
            alpha=alpha,
            positions=args.positions,
            fingerprint=lm.fingerprint,
        )
        corr.stats["metadata"] = parse_metadata(args.metadata)
        path = save_layer_correction(corr, _out_path(out, key, layer, len(layers) > 1))
        summary = {
            "task": key,
            "layer": layer,
            "k": corr.k,
            "lam": corr.lam,
            "explained_variance_top_k": corr.stats["explained_variance_top_k"],
            "top_k_shift_rms_before": corr.stats["top_k_shift_rms_before"],
            "top_k_shift_rms_after": corr.stats["top_k_shift_rms_after"],
            "out": str(path),
        }
        print(json.dumps(summary))
    return 0
