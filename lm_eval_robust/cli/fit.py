"""``lm-eval-robust fit``: a debiasing correction fitted on a task's ``_train`` split."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from lm_eval_robust.base.defaults import (
    DEFAULT_CLEAN_MARGIN,
    DEFAULT_FOLDS,
    DEFAULT_GEN_FOLDS,
    DEFAULT_RADII_PHI,
)
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli.args import (
    PROG,
    CommandParser,
    add_model_flags,
    model_kwargs,
    number_or_auto,
    parse_metadata,
    perturbed_task,
)

__all__ = ["build_parser", "collect", "main"]


def build_parser() -> CommandParser:
    p = CommandParser(
        "fit",
        "Collect features of a task's _train split through debiased_hf (the evaluation's own "
        "prompt path), fit a debiasing correction and write it as safetensors + JSON.",
        f"{PROG} fit --task ni065_format_pert --pretrained gemma-3-270m -o corr.safetensors",
    )
    p.add_argument("--task", default=None, help="perturbed task, e.g. ni065_format_pert")
    p.add_argument(
        "--tasks",
        default=None,
        help="instead of --task: several tasks, a comma list or select's targets .json; "
        "--features is then the collect_features root and -o a folder (one file per task)",
    )
    add_model_flags(p, batch_size="16")
    p.add_argument("--features", default=None, help="use features already collected in DIR")
    p.add_argument("--features_dir", default=None, help="where to collect (default: next to -o)")
    p.add_argument(
        "--any_split",
        action="store_true",
        help="allow --features of a split other than _train (leaks that split into the fit)",
    )
    p.add_argument(
        "--method",
        choices=[
            "ridge",
            "constant",
            "batch_calibration",
            "contextual_calibration",
            "clean_calibration",
            "auto",
        ],
        default="ridge",
        help="how the correction is fitted; auto: the kind chosen by grouped CV on the train "
        "split (docs/commands.md)",
    )
    p.add_argument(
        "--clean_margin",
        type=float,
        default=None,
        help="--method auto / --select generation: how far (BAC or the task's score, 0.01 = "
        "one point) a candidate's held-out clean score may fall below no correction's and still "
        "be chosen (default 0.01)",
    )
    p.add_argument(
        "--auto_folds",
        type=int,
        default=DEFAULT_FOLDS,
        help=f"--method auto: grouped CV folds (default {DEFAULT_FOLDS})",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="--method auto / --select generation: seed of the fold assignment",
    )
    p.add_argument("--lam", default="auto", help="ridge lambda, or 'auto' (grouped CV on train)")
    p.add_argument("--alpha", default="0", help="Gram penalty alpha, or 'auto' (CV on train)")
    p.add_argument("--psi", choices=["linear", "norm"], default="linear", help="ridge features ψ")
    p.add_argument(
        "--beta",
        choices=["midpoint", "mean"],
        default="midpoint",
        help="ridge β: midpoint of the residual range (paper) or the residual mean",
    )
    p.add_argument(
        "--phi", type=float, default=DEFAULT_RADII_PHI, help="failure ratio φ of the radii"
    )
    p.add_argument("--plot", default=None, help="constant method: write the search plot here")
    p.add_argument("-o", "--out", required=True, help="correction file (.safetensors)")
    p.add_argument(
        "--layer",
        default=None,
        help="generation tasks: fit intermediate-layer debiasing at decoder layer L (0-based), "
        "a comma list, or 'sweep' (first, quarter, half, last); -o is then a folder",
    )
    p.add_argument(
        "--k", type=int, default=None, help="--layer: principal components debiased (default 1)"
    )
    p.add_argument(
        "--select",
        choices=["mse", "generation"],
        default="mse",
        help="--layer: how k and λ are chosen. mse (default): --k as given, --lam auto picks λ by "
        "grouped CV of the squared error of the debiased shift (no generation). generation: "
        "(k, λ) from --k_grid x --lam_grid by the task's metric (EM, F1) on held-out train "
        "prompts generated with each candidate correction (grouped --gen_folds folds); costs "
        "n_train_prompts x (1 + layers x grid size) generations, e.g. 60 x 7 = 420 for one layer "
        "with the default grid",
    )
    p.add_argument(
        "--k_grid",
        default=None,
        help="--select generation: candidate k values, a comma list (default 1,2)",
    )
    p.add_argument(
        "--lam_grid",
        default=None,
        help="--select generation: candidate λ relative to the mean diagonal of the ridge Gram "
        "matrix (the scale of --lam auto's grid 1e-4..1), a comma list (default 1e-4,1e-2,1)",
    )
    p.add_argument(
        "--gen_folds",
        type=int,
        default=None,
        help=f"--select generation: grouped folds of train examples (default {DEFAULT_GEN_FOLDS})",
    )
    p.add_argument(
        "--gen_kwargs",
        default=None,
        help="--select generation: generation settings as for lm_eval, e.g. max_gen_toks=16 "
        "(use the ones the evaluation will use)",
    )
    p.add_argument(
        "--positions",
        default="prompt",
        help="--layer: decode positions edited: prompt (last prompt token), generated, all",
    )
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    if (args.task is None) == (args.tasks is None):
        raise UserError("give --task TASK, or --tasks with a comma list or a targets .json")
    if args.tasks is not None:
        return _fit_many(args)
    return _fit_one(args)


#: what ``fit --tasks`` writes into its folder (an existing folder of only these is replaced)
FIT_TASKS_FILES = ("*.safetensors", "*_search.png")


def _fit_many(args: argparse.Namespace) -> int:
    """``fit --tasks``: one correction per task into the folder ``-o``."""
    from pathlib import Path

    from lm_eval_robust.report.targets import read_task_list

    if args.layer is not None:
        raise UserError("--layer fits one generation task at a time; use --task")
    out = Path(args.out)
    if out.suffix == ".safetensors":
        raise UserError(f"with --tasks, -o is a folder (one file per task), not {out.name}")
    keys = [perturbed_task(task, "--tasks") for task in read_task_list(args.tasks)]
    from lm_eval_robust.base.atomic import atomic_dir, check_replaceable

    _refuse_fit_inputs(out, args.features, args.pretrained)
    # the folder appears whole with every task's correction, or not at all; an existing one is
    # replaced whole (no correction of an earlier fit left beside the new ones)
    check_replaceable(out, "-o", "fit --tasks", FIT_TASKS_FILES)
    try:
        with atomic_dir(out, "corrections") as staged:
            for key in keys:
                one = argparse.Namespace(**vars(args))
                one.task, one.out = key, str(staged / f"{key}.safetensors")
                if args.features:
                    one.features = str(Path(args.features) / f"{key}_train")
                if args.plot:
                    one.plot = str(staged / f"{key}_search.png")
                rc = _fit_one(one, lands_at=out / f"{key}.safetensors")
                if rc:
                    raise _FitFailed(rc)  # nothing lands: the staged folder is removed
    except _FitFailed as failed:
        return failed.rc
    return 0


class _FitFailed(Exception):
    """One task of ``fit --tasks`` failed (its message is printed): the folder is not written."""

    def __init__(self, rc: int) -> None:
        super().__init__(rc)
        self.rc = rc


def _fit_one(args: argparse.Namespace, lands_at: Any = None) -> int:
    """One correction into ``-o``; ``lands_at`` is where the summary says it lands when ``-o``
    is a staged file that is moved there afterwards (``fit --tasks``)."""
    import json
    from pathlib import Path

    from lm_eval_robust.scoring.correction import correction_key, fit_summary, save
    from lm_eval_robust.stats.fit.run import FitSettings, fit_features
    from lm_eval_robust.values.features import load_features

    if args.layer is not None:
        from lm_eval_robust.cli.fit_layers import fit_layers

        return fit_layers(args, correction_key(args.task))
    key = perturbed_task(args.task)  # unknown or misspelt task: one line before any work
    from lm_eval_robust.base.validate import check_seed

    check_seed(args.seed)
    _refuse_layer_flags(args)
    from lm_eval_robust.tasks.ni import NIConfig

    NIConfig.from_metadata(parse_metadata(args.metadata))  # settings too, before the model loads
    out = Path(args.out)
    if out.parent.exists() and not out.parent.is_dir():
        raise UserError(f"cannot write the correction to {out}: {out.parent} is a file; choose -o")
    _refuse_fit_inputs(out, args.features, args.pretrained)
    if args.plot:
        if args.method != "constant":
            raise UserError(
                f"--plot draws the search of --method constant, not {args.method}; drop it"
            )
        from lm_eval_robust.base.atomic import refuse_overwrite

        refuse_overwrite(args.plot, "--plot", [("correction -o", out)])
        _refuse_fit_inputs(args.plot, args.features, args.pretrained, flag="--plot")
    if args.method == "contextual_calibration":  # needs the model, not collected features
        return _fit_contextual(key, args, out)
    if args.clean_margin is not None and args.method != "auto":
        raise UserError(
            "--clean_margin is a setting of --method auto; drop it or add --method auto"
        )
    settings = FitSettings(
        method="ridge" if args.method == "auto" else args.method,
        lam=number_or_auto("--lam", args.lam, minimum=0.0),
        alpha=number_or_auto("--alpha", args.alpha, minimum=0.0),
        psi=args.psi,
        phi=args.phi,
        beta=args.beta,
    )
    if args.features:
        feat_dir = Path(args.features)
    else:
        root = Path(args.features_dir) if args.features_dir else out.with_suffix(".features")
        from lm_eval_robust.base.atomic import refuse_overwrite

        refuse_overwrite(root, "--features_dir", [("model folder", args.pretrained)])
        refuse_overwrite(out, "-o", [("features folder", root)])
        collect(
            key + "_train", args.pretrained, args.model_args, args.metadata, root, args.batch_size
        )
        feat_dir = root / (key + "_train")
    _refuse_fit_inputs(out, feat_dir, args.pretrained)
    feats = load_features(feat_dir)
    _check_train_split(feats.task, feat_dir, args.any_split)
    if correction_key(feats.task) != key:
        raise UserError(
            f"features in {feat_dir} are for {feats.task}, not {key}_train; pass --task "
            f"{correction_key(feats.task)} or collect {key}_train"
        )
    if args.method == "constant":
        from lm_eval_robust.stats.fit.run import constant_search_of

        search = constant_search_of(feats, settings)
        if args.plot:
            from lm_eval_robust.stats.fit.constant import plot_constant_search

            plot_constant_search(search, args.plot)
        if search.b is None:  # the paper's "–" rows: say so, write nothing
            print(
                json.dumps({"task": key, "method": "constant", "b": None, "reason": search.reason})
            )
            return 0
    if args.method == "auto":
        return _fit_auto(feats, settings, args, out, lands_at)
    correction = fit_features(feats, settings)
    save(correction, out)
    summary = {"task": correction.task, **fit_summary(correction)}
    summary.pop("n_examples", None)
    if correction.stats.get("b") is not None:
        summary["b"] = correction.stats["b"]
    summary["out"] = str(lands_at or out)
    print(json.dumps(summary))
    return 0


def _fit_auto(
    feats: Any, settings: Any, args: argparse.Namespace, out: Any, lands_at: Any = None
) -> int:
    """``--method auto``: grouped CV on train, the chosen kind refitted and saved with its table."""
    import json

    from lm_eval_robust.scoring.correction import fit_summary, save
    from lm_eval_robust.stats.fit.auto import AutoSettings, auto_fit

    margin = DEFAULT_CLEAN_MARGIN if args.clean_margin is None else args.clean_margin
    auto = AutoSettings(n_folds=args.auto_folds, seed=args.seed, clean_margin=margin, fit=settings)
    correction = auto_fit(feats, auto)
    save(correction, out)
    info = correction.stats["auto"]
    fitted = {k: v for k, v in fit_summary(correction).items() if k not in ("method", "n_examples")}
    summary: dict[str, Any] = {"task": correction.task, "method": "auto", "chosen": info["chosen"]}
    if info["chosen"] == "none":
        summary["note"] = (
            "no correction kind beat none on the held-out train folds: the file is an identity "
            "correction (applying it changes nothing)"
        )
    if str(args.lam) != "auto" and not str(info["chosen"]).startswith("ridge"):
        summary["lam_note"] = (
            f"--lam {args.lam} was used by the ridge candidates only; the chosen kind "
            f"{info['chosen']} has no λ"
        )
    summary |= fitted
    # mean held-out [clean BAC, perturbed BAC] per kind (null: not cross-validated)
    summary["cv"] = {
        r["method"]: None if r["skipped"] else [r["bac_clean"], r["bac_pert"]]
        for r in info["table"]
    }
    summary["out"] = str(lands_at or out)
    print(json.dumps(summary))
    return 0


def _refuse_layer_flags(args: argparse.Namespace) -> None:
    """Flags of the intermediate-layer fit given to a classification fit: one line."""
    given = [
        flag
        for flag, value in (
            ("--select generation", args.select != "mse" or None),
            ("--k", args.k),
            ("--k_grid", args.k_grid),
            ("--lam_grid", args.lam_grid),
            ("--gen_folds", args.gen_folds),
            ("--gen_kwargs", args.gen_kwargs),
        )
        if value is not None
    ]
    if given:
        raise UserError(
            f"{', '.join(given)} belong to intermediate-layer fits of generation tasks; add "
            "--layer L with a *_text_pert generation task, or drop them"
        )


def _refuse_fit_inputs(out: Any, feat_dir: Any, pretrained: Any = None, flag: str = "-o") -> None:
    """``-o`` must not be, hold or sit inside the features folder (or be one of its shards),
    nor the model folder."""
    from pathlib import Path

    from lm_eval_robust.base.atomic import refuse_overwrite

    if feat_dir and Path(feat_dir).is_dir():
        shards = sorted(Path(feat_dir).glob("rank*.safetensors"))
    else:
        shards = []
    inputs = [("features", feat_dir), *(("feature shard", s) for s in shards)]
    inputs.append(("model folder", pretrained))
    refuse_overwrite(out, flag, inputs)


def _check_train_split(task: str, feat_dir: Any, any_split: bool) -> None:
    """Fitting on the test or hold-out split leaks it into the correction: refused by default."""
    if task.endswith("_train") or any_split:
        return
    raise UserError(
        f"features in {feat_dir} are from {task}, not a _train split: fitting on them leaks the "
        "split the correction is evaluated on; collect the _train split, or pass --any-split "
        "to fit on it on purpose"
    )


def _fit_contextual(key: str, args: argparse.Namespace, out: Any) -> int:
    import json

    from lm_eval_robust.scoring.correction import save
    from lm_eval_robust.scoring.model import DebiasedHFLM
    from lm_eval_robust.stats.fit.run import contextual_calibration
    from lm_eval_robust.tasks.ni import NIConfig

    lm = DebiasedHFLM(pretrained=args.pretrained, **model_kwargs(args.model_args))
    corr = contextual_calibration(key, lm, NIConfig.from_metadata(parse_metadata(args.metadata)))
    save(corr, out)
    print(json.dumps({"task": key, "method": corr.method, "p_cf": corr.stats["p_cf"]}))
    return 0


def collect(
    task: str, pretrained: str, model_args: str, metadata: str, root: Any, batch_size: str
) -> None:
    """Run the harness on ``task`` with feature collection into ``root``."""

    import lm_eval
    from lm_eval.tasks import TaskManager

    from lm_eval_robust.harness._plugin import register, task_dir

    register()
    md = parse_metadata(metadata)
    extra = model_kwargs(model_args)
    tm = TaskManager(include_path=task_dir(), include_defaults=False, metadata=md)
    lm_eval.simple_evaluate(
        model="debiased_hf",
        model_args={"pretrained": pretrained, "collect_features": str(root), **extra},
        tasks=[task],
        task_manager=tm,
        batch_size=batch_size,
    )
