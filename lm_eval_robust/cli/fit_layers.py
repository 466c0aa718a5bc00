"""``lm-eval-robust fit --task <name>_text_pert --layer L|a,b|sweep``: the intermediate-layer fit.

Builds the ``_train`` docs (clean prompts and fitting perturbations), encodes them as the
harness's ``generate_until`` does (``tok_batch_encode``, left truncation to ``max_length −
max_gen_toks``), collects the last prompt token's state at every requested layer in one pass,
fits one correction per layer and writes it. One layer: ``-o FILE.safetensors`` (or a folder,
holding ``<task>.safetensors``); several: ``-o DIR`` gets ``DIR/L<layer>/<task>.safetensors``,
so ``layer_correction=DIR/L<layer>`` applies one layer to every task fitted there.

``--select generation`` chooses ``k`` and λ per layer by the task's metric on held-out train
prompts generated through ``debiased_hf`` with each candidate correction
(:func:`~lm_eval_robust.scoring.generation.tune.tune_by_generation` with
:class:`~lm_eval_robust.scoring.generation.gen_score.GenerationScorer`); the file's statistics hold
the choice and its cross-validation table.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lm_eval_robust.base.defaults import (
    DEFAULT_CLEAN_MARGIN,
    DEFAULT_GEN_FOLDS,
    DEFAULT_GEN_K_GRID,
    DEFAULT_GEN_LAM_GRID,
)
from lm_eval_robust.base.errors import UserError

SUFFIX = "_text_pert"


def gen_task_of(key: str) -> str:
    """``nq_open_text_pert`` (the key of ``robust_nq_open_text_pert``) -> ``nq_open``; a one-line
    error for anything else."""
    from lm_eval_robust.tasks.generation.tasks import GEN_TASKS

    name = key[: -len(SUFFIX)] if key.endswith(SUFFIX) else ""
    if name not in GEN_TASKS:
        names = ", ".join(f"robust_{n}{SUFFIX}" for n in GEN_TASKS)
        raise UserError(f"--layer fits generation tasks ({names}), not {key!r}; pick one of them")
    return name


def _out_path(out: Path, key: str, layer: int, several: bool) -> Path:
    if several:
        return out / f"L{layer}" / f"{key}.safetensors"
    if out.suffix == ".safetensors":
        return out
    return out / f"{key}.safetensors"


@dataclass(frozen=True)
class LayerFitArgs:
    """The layer-fit flags, checked before the model loads."""

    k: int
    lam: float | None
    alpha: float
    positions: str
    select: str
    ks: tuple[int, ...]
    lams_rel: tuple[float, ...]
    gen_folds: int
    gen_kwargs: dict[str, Any]
    clean_margin: float
    seed: int


#: the most values a --k_grid / --lam_grid may hold (each costs a pass of generations per fold)
GRID_MAX = 16
#: the largest k (principal components) a layer fit may ask for
K_MAX = 1024
#: the most new tokens a selection generation may ask for
MAX_GEN_TOKS = 4096
#: generation settings lm-eval's HF model takes in ``gen_kwargs`` (the rest go to ``generate``,
#: which would fail on them only after the model has loaded)
GEN_KWARGS = (
    "max_gen_toks",
    "until",
    "do_sample",
    "temperature",
    "top_p",
    "top_k",
    "num_beams",
    "repetition_penalty",
    "min_new_tokens",
)


def _grid(flag: str, text: str | None, default: tuple[Any, ...], kind: type) -> tuple[Any, ...]:
    import math

    if text is None:
        return default
    try:
        values = tuple(kind(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    ok = bool(values) and all(v > 0 and math.isfinite(v) for v in values)
    if not ok:
        example = "1,2,4" if kind is int else "1e-4,1e-2,1"
        raise UserError(
            f"{flag} must be a comma list of positive numbers, got {text!r}; e.g. {flag} {example}"
        )
    values = tuple(dict.fromkeys(values))
    if len(values) > GRID_MAX:
        raise UserError(
            f"{flag} holds {len(values)} values; at most {GRID_MAX} (each costs a pass of "
            "generations per fold)"
        )
    if kind is int and max(values) > K_MAX:
        raise UserError(f"{flag} values must be between 1 and {K_MAX}; got {max(values)}")
    return values


def _gen_kwargs(text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    from lm_eval.utils import simple_parse_args_string

    from lm_eval_robust.base.validate import nearest

    if any("=" not in part for part in text.split(",") if part.strip()):
        kwargs: dict[str, Any] = {}
    else:
        try:
            kwargs = dict(simple_parse_args_string(text))
        except (ValueError, IndexError):
            kwargs = {}
    if not kwargs:
        raise UserError(
            f"--gen_kwargs must be k=v pairs as for lm_eval, got {text!r}; e.g. "
            "--gen_kwargs max_gen_toks=16"
        )
    for key in kwargs:
        if key not in GEN_KWARGS:
            near = nearest(key, GEN_KWARGS)
            hint = f"did you mean {near!r}?" if near else f"valid: {', '.join(GEN_KWARGS)}"
            raise UserError(f"--gen_kwargs: unknown setting {key!r}; {hint}")
    if kwargs.get("do_sample") not in (None, False):
        raise UserError(
            "--gen_kwargs do_sample=True: the selection scores greedy generations "
            "(as the evaluation does); drop do_sample"
        )
    toks = kwargs.get("max_gen_toks")
    if toks is not None and (
        isinstance(toks, bool) or not isinstance(toks, int) or not 1 <= toks <= MAX_GEN_TOKS
    ):
        raise UserError(
            f"--gen_kwargs max_gen_toks must be an integer between 1 and {MAX_GEN_TOKS}; got "
            f"{toks!r}"
        )
    for key in ("temperature", "top_p", "repetition_penalty"):
        v = kwargs.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
            raise UserError(f"--gen_kwargs {key} must be a number >= 0; got {v!r}")
    for key in ("top_k", "num_beams", "min_new_tokens"):
        v = kwargs.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise UserError(f"--gen_kwargs {key} must be an integer >= 0; got {v!r}")
    return kwargs


def check_layer_args(args: argparse.Namespace) -> LayerFitArgs:
    """The layer-fit flags as :class:`LayerFitArgs`; one line for any bad or clashing one."""
    from lm_eval_robust.cli.args import check_seed, number_or_auto
    from lm_eval_robust.scoring.generation.layers import POSITIONS

    if args.method != "ridge":
        raise UserError(f"--layer fits the ridge only, not --method {args.method}; drop --method")
    if args.positions not in POSITIONS:
        raise UserError(f"--positions must be one of {', '.join(POSITIONS)}")
    k = 1 if args.k is None else int(args.k)
    if not 1 <= k <= K_MAX:
        raise UserError(f"--k must be between 1 and {K_MAX}, got {args.k}")
    lam = number_or_auto("--lam", args.lam, minimum=0.0)
    alpha = number_or_auto("--alpha", args.alpha, minimum=0.0)
    if alpha is None:
        raise UserError("--alpha auto is for classification fits; give a number for --layer")
    generation = args.select == "generation"
    if generation:
        if args.k is not None or lam is not None:
            raise UserError(
                "--select generation chooses k and λ from --k_grid and --lam_grid; drop --k and "
                "--lam (or use --select mse to fix them)"
            )
    else:
        named = [
            flag
            for flag, value in (
                ("--k_grid", args.k_grid),
                ("--lam_grid", args.lam_grid),
                ("--gen_folds", args.gen_folds),
                ("--gen_kwargs", args.gen_kwargs),
                ("--clean_margin", args.clean_margin),
            )
            if value is not None
        ]
        if named:
            raise UserError(
                f"{', '.join(named)} are settings of --select generation; add it or drop them"
            )
    margin = DEFAULT_CLEAN_MARGIN if args.clean_margin is None else float(args.clean_margin)
    folds = DEFAULT_GEN_FOLDS if args.gen_folds is None else int(args.gen_folds)
    if not 2 <= folds <= 20:
        raise UserError(f"--gen_folds must be between 2 and 20, got {folds}; e.g. --gen_folds 3")
    check_seed(int(args.seed))
    if not 0 <= margin <= 1:
        raise UserError(f"--clean_margin must be in [0, 1] (0.01 = one point), got {margin}")
    return LayerFitArgs(
        k=k,
        lam=lam,
        alpha=float(alpha),
        positions=args.positions,
        select=args.select,
        ks=_grid("--k_grid", args.k_grid, DEFAULT_GEN_K_GRID, int),
        lams_rel=_grid("--lam_grid", args.lam_grid, DEFAULT_GEN_LAM_GRID, float),
        gen_folds=folds,
        gen_kwargs=_gen_kwargs(args.gen_kwargs) if generation else {},
        clean_margin=margin,
        seed=int(args.seed),
    )


def fit_layers(args: argparse.Namespace, key: str) -> int:
    """Run the layer fit described by the parsed ``fit`` arguments."""
    from lm_eval_robust.cli.args import model_kwargs, parse_metadata
    from lm_eval_robust.scoring.generation.fit import fit_layer_correction, save_layer_correction
    from lm_eval_robust.scoring.generation.layers import (
        collect_last_states,
        decoder_layers,
        encode_prompts,
        resolve_layers,
    )
    from lm_eval_robust.scoring.generation.tune import GenTuneSettings
    from lm_eval_robust.scoring.model import DebiasedHFLM
    from lm_eval_robust.tasks.generation.tasks import GenConfig, build_docs, get_task

    name = gen_task_of(key)
    flags = check_layer_args(args)
    select = None
    if flags.select == "generation":
        select = GenTuneSettings(
            ks=flags.ks,
            lams_rel=flags.lams_rel,
            n_folds=flags.gen_folds,
            seed=flags.seed,
            clean_margin=flags.clean_margin,
        )
    config = GenConfig.from_metadata(parse_metadata(args.metadata))
    if select is not None and config.n_train < 2 * select.n_folds:
        raise UserError(
            f"--select generation with {select.n_folds} folds needs at least "
            f"{2 * select.n_folds} train examples (2 per fold), but n_train is {config.n_train}; "
            "raise n_train in --metadata or lower --gen_folds"
        )
    docs = build_docs(name, "text", "train", config)
    out = Path(args.out)
    from lm_eval_robust.base.atomic import refuse_overwrite

    refuse_overwrite(out, "-o", [("model folder", args.pretrained)])
    task = get_task(name)
    lm = DebiasedHFLM(pretrained=args.pretrained, **model_kwargs(args.model_args))
    n_layers = len(decoder_layers(lm.model))
    layers = resolve_layers(args.layer, n_layers)
    from lm_eval_robust.scoring.generation.gen_score import generation_kwargs

    gen_kwargs = generation_kwargs(task, flags.gen_kwargs)
    max_gen = int(gen_kwargs["max_gen_toks"])
    tokens = encode_prompts(lm, [d["prompt"] for d in docs], max_gen)
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
    scorer = None
    if select is not None:
        from lm_eval_robust.scoring.generation.gen_score import (
            GenerationScorer,
            add_changed_counts,
            n_generations,
        )

        settings_n = len(select.ks) * len(select.lams_rel)
        scorer = GenerationScorer(
            lm,
            task,
            key,
            docs,
            clean,
            pert,
            gen_kwargs,
            total=n_generations(len(clean) + len(pert), len(layers), settings_n),
        )
    for layer in layers:
        x = states[layer]
        common: dict[str, Any] = {
            "layer": layer,
            "num_layers": n_layers,
            "task": key,
            "alpha": flags.alpha,
            "positions": flags.positions,
            "fingerprint": lm.fingerprint,
        }
        xc, xp = x[np.asarray(clean)], x[np.asarray(pert)]
        if select is not None and scorer is not None:
            from lm_eval_robust.scoring.generation.tune import tune_by_generation

            before, first_call = scorer.n_generated, len(scorer.calls)
            corr = tune_by_generation(xc, xp, pair, groups, scorer, settings=select, **common)
            info = corr.stats["generation_selection"]
            add_changed_counts(info["table"], scorer.calls[first_call:])
            info["score"] = f"{task.metric} ({scorer.score_name})"
            info["gen_kwargs"] = gen_kwargs
            info["n_generations"] = scorer.n_generated - before
        else:
            corr = fit_layer_correction(xc, xp, pair, groups, k=flags.k, lam=flags.lam, **common)
        corr.stats["metadata"] = parse_metadata(args.metadata)
        path = save_layer_correction(corr, _out_path(out, key, layer, len(layers) > 1))
        if scorer is not None:
            scorer.clear_progress()
        print(json.dumps(_summary(key, layer, corr, path)), flush=True)
    if scorer is not None:
        scorer.close()
    return 0


def _summary(key: str, layer: int, corr: Any, path: Path) -> dict[str, Any]:
    """The one JSON line printed per layer."""
    summary: dict[str, Any] = {"task": key, "layer": layer, "k": corr.k, "lam": corr.lam}
    sel = corr.stats.get("generation_selection")
    if sel is not None:
        summary["select"] = "generation"
        summary["chosen"] = sel["chosen"]
        if sel["chosen"] == "none":
            summary["note"] = (
                "no (k, λ) beat no correction on the held-out train prompts: the file is an "
                "identity correction (applying it changes nothing)"
            )
        # mean held-out [clean, perturbed] score per setting ("none": no correction), and how
        # many held-out answers the setting changed
        summary["cv"] = {
            ("none" if r["k"] is None else f"k={r['k']},lam_rel={r['lam_rel']:g}"): [
                r["score_clean"],
                r["score_pert"],
                r.get("changed"),
            ]
            for r in sel["table"]
        }
        summary["n_generations"] = sel["n_generations"]
    summary |= {
        "explained_variance_top_k": corr.stats["explained_variance_top_k"],
        "top_k_shift_rms_before": corr.stats["top_k_shift_rms_before"],
        "top_k_shift_rms_after": corr.stats["top_k_shift_rms_after"],
        "out": str(path),
    }
    return summary
