"""``lm-eval-robust``: run the harness with our plugin, look at prompts, fit, report.

lm-eval-robust run --model debiased_hf --tasks ni065_format_pert ...   (every lm_eval flag)
lm-eval-robust perturb --task ni065 --kind format -n 5
lm-eval-robust fit --task ni065_format_pert --pretrained gemma-3-270m -o corr.safetensors
lm-eval-robust report RUN_BASE RUN_DEBIASED --labels base,debiased -o report/
lm-eval-robust lora --task ni065_format_pert --pretrained gemma-3-270m -o adapters/
lm-eval-robust replay RUN_BASE --features FEATS --correction corrections/ -o RUN_REPLAYED
lm-eval-robust plan RUN_PILOT [RUN_DEBIASED] --effect 1    (examples needed for a 1-point effect)
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import textwrap
import unicodedata
from collections.abc import Sequence
from typing import Any

from lm_eval_robust.errors import OneLineArgumentParser, UserError


def _number_or_auto(flag: str, value: str, *, minimum: float | None = None) -> float | None:
    if value == "auto":
        return None
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or (minimum is not None and x < minimum):
        bound = f" >= {minimum:g}" if minimum is not None else ""
        raise UserError(f"{flag} must be a number{bound} or 'auto', got {value!r}")
    return x


def _cmd_run(argv: Sequence[str]) -> int:
    from lm_eval._cli import HarnessCLI
    from lm_eval.utils import setup_logging

    from lm_eval_robust._plugin import register

    register()
    setup_logging()
    sys.argv = ["lm_eval", "run", *argv]
    parser = HarnessCLI()
    parser.execute(parser.parse_args())
    return 0


_INVISIBLE = {"Cf", "Cc", "Zl", "Zp"}


INVISIBLE_MARK = "◦"


def show_invisible(text: str) -> str:
    """Show each zero-width/format/control character as one ``◦`` (newlines and tabs kept)."""
    out = []
    for ch in text:
        if ch not in "\n\t" and unicodedata.category(ch) in _INVISIBLE:
            out.append(INVISIBLE_MARK)
        else:
            out.append(ch)
    return "".join(out)


def side_by_side(left: str, right: str, width: int, titles: tuple[str, str]) -> str:
    """Two texts in two columns, each wrapped to half the width."""
    col = max(20, (width - 3) // 2)

    def lines(text: str) -> list[str]:
        out: list[str] = []
        for raw in text.expandtabs(4).split("\n"):
            out.extend(
                textwrap.wrap(raw, col, replace_whitespace=False, drop_whitespace=False) or [""]
            )
        return out

    a, b = lines(left), lines(right)
    n = max(len(a), len(b))
    a += [""] * (n - len(a))
    b += [""] * (n - len(b))
    rows = [f"{titles[0]:<{col}} | {titles[1]}", f"{'-' * col}-+-{'-' * col}"]
    rows += [
        f"{x:<{col}} {'|' if x.rstrip() == y.rstrip() else '*'} {y}"
        for x, y in zip(a, b, strict=True)
    ]
    return "\n".join(rows)


def _cmd_perturb(argv: Sequence[str]) -> int:
    from lm_eval_robust.tasks.ni import NIConfig, build_docs

    p = OneLineArgumentParser(
        prog="lm-eval-robust perturb",
        description="Print a task's clean prompt beside its perturbed variants.",
    )
    p.add_argument("--task", required=True, help="task, e.g. ni065 (or 065, task065)")
    p.add_argument("--kind", choices=["format", "text"], default="format")
    p.add_argument("-n", type=int, default=3, help="number of perturbed variants")
    p.add_argument("--split", choices=["train", "test", "holdout"], default="test")
    p.add_argument("--example", type=int, default=0, help="index of the example in the split")
    p.add_argument(
        "--data-dir", default=None, help="local data root (else $LM_EVAL_ROBUST_DATA_DIR)"
    )
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--text-rate", type=float, default=0.05)
    p.add_argument("--text-scope", choices=["all", "query"], default="all")
    p.add_argument("--width", type=int, default=None, help="output width (default: terminal)")
    p.add_argument("--raw", action="store_true", help="do not mark invisible characters")
    args = p.parse_args(list(argv))
    if args.n < 1:
        raise UserError(f"-n must be at least 1, got {args.n}")
    config = NIConfig.from_metadata(
        {
            "n_perturbations": args.n,
            "data_dir": args.data_dir,
            "seed": args.seed,
            "text_rate": args.text_rate,
            "text_scope": args.text_scope,
        }
    )
    docs = build_docs(args.task, args.kind, args.split, config)
    ids = sorted({d["example_id"] for d in docs if d["pert_id"] == 0})
    if not 0 <= args.example < len(ids):
        raise UserError(f"--example must be in [0, {len(ids) - 1}], got {args.example}")
    mine = sorted(
        (d for d in docs if d["example_id"] == ids[args.example]), key=lambda d: d["pert_id"]
    )
    width = args.width or shutil.get_terminal_size((160, 40)).columns
    fix = (lambda s: s) if args.raw else show_invisible
    clean = mine[0]
    if not args.raw:
        print(f"({INVISIBLE_MARK} marks an invisible character; * marks a line that differs)\n")
    for doc in mine[1:]:
        title = f"#{doc['pert_id']} {doc['pert_kind']} (format {doc['format_id']})"
        print(side_by_side(fix(clean["prompt"]), fix(doc["prompt"]), width, ("clean", title)))
        gold = doc["labels"][doc["gold"]]
        print(f"labels: {doc['labels']}  gold: {gold!r}  scored: {doc['choices']}\n")
    return 0


def _cmd_fit(argv: Sequence[str]) -> int:
    p = OneLineArgumentParser(
        prog="lm-eval-robust fit",
        description=(
            "Collect features of a task's _train split through debiased_hf (the evaluation's own "
            "prompt path), fit a debiasing correction and write it as safetensors + JSON."
        ),
    )
    p.add_argument("--task", default=None, help="perturbed task, e.g. ni065_format_pert")
    p.add_argument(
        "--tasks",
        default=None,
        help="instead of --task: several tasks, a comma list or select's targets .json; "
        "--features is then the collect_features root and -o a folder (one file per task)",
    )
    p.add_argument("--pretrained", default="gemma-3-270m")
    p.add_argument("--model-args", default="", help="extra model args, k=v,k=v (e.g. dtype=...)")
    p.add_argument("--metadata", default="{}", help="task settings as JSON, as for lm_eval")
    p.add_argument("--features", default=None, help="use features already collected in DIR")
    p.add_argument("--features-dir", default=None, help="where to collect (default: next to -o)")
    p.add_argument(
        "--any-split",
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
        ],
        default="ridge",
    )
    p.add_argument("--lam", default="auto", help="ridge lambda, or 'auto' (grouped CV on train)")
    p.add_argument("--alpha", default="0", help="Gram penalty alpha, or 'auto' (CV on train)")
    p.add_argument("--psi", choices=["linear", "norm"], default="linear")
    p.add_argument(
        "--beta",
        choices=["midpoint", "mean"],
        default="midpoint",
        help="ridge β: midpoint of the residual range (paper) or the residual mean",
    )
    p.add_argument("--phi", type=float, default=0.05)
    p.add_argument("--batch-size", default="16")
    p.add_argument("--plot", default=None, help="constant method: write the search plot here")
    p.add_argument("-o", "--out", required=True, help="correction file (.safetensors)")
    p.add_argument(
        "--layer",
        default=None,
        help="generation tasks: fit intermediate-layer debiasing at decoder layer L (0-based), "
        "a comma list, or 'sweep' (first, quarter, half, last); -o is then a folder",
    )
    p.add_argument("--k", type=int, default=1, help="--layer: principal components debiased")
    p.add_argument(
        "--positions",
        default="prompt",
        help="--layer: decode positions edited: prompt (last prompt token), generated, all",
    )
    args = p.parse_args(list(argv))
    if (args.task is None) == (args.tasks is None):
        raise UserError("give --task TASK, or --tasks with a comma list or a targets .json")
    if args.tasks is not None:
        return _fit_many(args)
    return _fit_one(args)


def _fit_many(args: argparse.Namespace) -> int:
    """``fit --tasks``: one correction per task into the folder ``-o``."""
    from pathlib import Path

    from lm_eval_robust.correction import correction_key
    from lm_eval_robust.select import read_task_list

    if args.layer is not None:
        raise UserError("--layer fits one generation task at a time; use --task")
    out = Path(args.out)
    if out.suffix == ".safetensors":
        raise UserError(f"with --tasks, -o is a folder (one file per task), not {out.name}")
    for task in read_task_list(args.tasks):
        key = correction_key(task)
        one = argparse.Namespace(**vars(args))
        one.task, one.out = key, str(out / f"{key}.safetensors")
        if args.features:
            one.features = str(Path(args.features) / f"{key}_train")
        if args.plot:
            one.plot = str(out / f"{key}_search.png")
        rc = _fit_one(one)
        if rc:
            return rc
    return 0


def _fit_one(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from lm_eval_robust.correction import correction_key, fit_summary, save
    from lm_eval_robust.fit.features import load_features
    from lm_eval_robust.fit.run import FitSettings, fit_features
    from lm_eval_robust.tasks.specs import get_spec

    key = correction_key(args.task)
    if args.layer is not None:
        from lm_eval_robust.generation.cli import fit_layers

        return fit_layers(args, key)
    get_spec(key.split("_")[0])  # unknown task: one-line error before any work
    from lm_eval_robust.tasks.ni import NIConfig

    NIConfig.from_metadata(_parse_metadata(args.metadata))  # settings too, before the model loads
    out = Path(args.out)
    if out.parent.exists() and not out.parent.is_dir():
        raise UserError(f"cannot write the correction to {out}: {out.parent} is a file; choose -o")
    if args.method == "contextual_calibration":  # needs the model, not collected features
        return _fit_contextual(key, args, out)
    settings = FitSettings(
        method=args.method,
        lam=_number_or_auto("--lam", args.lam, minimum=0.0),
        alpha=_number_or_auto("--alpha", args.alpha, minimum=0.0),
        psi=args.psi,
        phi=args.phi,
        beta=args.beta,
    )
    if args.features:
        feat_dir = Path(args.features)
    else:
        root = Path(args.features_dir) if args.features_dir else out.with_suffix(".features")
        collect(
            key + "_train", args.pretrained, args.model_args, args.metadata, root, args.batch_size
        )
        feat_dir = root / (key + "_train")
    _refuse_fit_inputs(out, feat_dir)
    feats = load_features(feat_dir)
    _check_train_split(feats.task, feat_dir, args.any_split)
    if correction_key(feats.task) != key:
        raise UserError(
            f"features in {feat_dir} are for {feats.task}, not {key}_train; pass --task "
            f"{correction_key(feats.task)} or collect {key}_train"
        )
    if args.method == "constant":
        from lm_eval_robust.fit.run import constant_search_of

        search = constant_search_of(feats, settings)
        if args.plot:
            from lm_eval_robust.fit.constant import plot_constant_search

            plot_constant_search(search, args.plot)
        if search.b is None:  # the paper's "–" rows: say so, write nothing
            print(
                json.dumps({"task": key, "method": "constant", "b": None, "reason": search.reason})
            )
            return 0
    correction = fit_features(feats, settings)
    save(correction, out)
    summary = {"task": correction.task, **fit_summary(correction)}
    summary.pop("n_examples", None)
    if correction.stats.get("b") is not None:
        summary["b"] = correction.stats["b"]
    summary["out"] = str(out)
    print(json.dumps(summary))
    return 0


def _refuse_fit_inputs(out: Any, feat_dir: Any) -> None:
    """``-o`` must not be the features folder, hold it, or be one of its shards."""
    from pathlib import Path

    from lm_eval_robust.atomic import refuse_overwrite

    shards = sorted(Path(feat_dir).glob("rank*.safetensors")) if Path(feat_dir).is_dir() else []
    refuse_overwrite(out, "-o", [("features", feat_dir), *(("feature shard", s) for s in shards)])


def _check_train_split(task: str, feat_dir: Any, any_split: bool) -> None:
    """Fitting on the test or hold-out split leaks it into the correction: refused by default."""
    if task.endswith("_train") or any_split:
        return
    raise UserError(
        f"features in {feat_dir} are from {task}, not a _train split: fitting on them leaks the "
        "split the correction is evaluated on; collect the _train split, or pass --any-split "
        "to fit on it on purpose"
    )


def _parse_metadata(text: str) -> dict[str, Any]:
    """``--metadata`` of the fit command: a JSON object, as for lm_eval."""
    import json

    try:
        md = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"--metadata must be JSON, e.g. '{{\"n_perturbations\": 20}}' ({exc})"
        ) from None
    return dict(md)


def _model_kwargs(text: str) -> dict[str, Any]:
    """``--model-args k=v,k=v``, with a device (the harness needs one when called from Python)."""
    extra = dict(kv.split("=", 1) for kv in text.split(",") if kv.strip())
    if "device" not in extra:
        import torch

        extra["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    return extra


def _fit_contextual(key: str, args: argparse.Namespace, out: Any) -> int:
    import json

    from lm_eval_robust.correction import save
    from lm_eval_robust.fit.run import contextual_calibration
    from lm_eval_robust.model import DebiasedHFLM
    from lm_eval_robust.tasks.ni import NIConfig

    lm = DebiasedHFLM(pretrained=args.pretrained, **_model_kwargs(args.model_args))
    corr = contextual_calibration(key, lm, NIConfig.from_metadata(_parse_metadata(args.metadata)))
    save(corr, out)
    print(json.dumps({"task": key, "method": corr.method, "p_cf": corr.stats["p_cf"]}))
    return 0


def collect(
    task: str, pretrained: str, model_args: str, metadata: str, root: Any, batch_size: str
) -> None:
    """Run the harness on ``task`` with feature collection into ``root``."""

    import lm_eval
    from lm_eval.tasks import TaskManager

    from lm_eval_robust._plugin import register, task_dir

    register()
    md = _parse_metadata(metadata)
    extra = _model_kwargs(model_args)
    tm = TaskManager(include_path=task_dir(), include_defaults=False, metadata=md)
    lm_eval.simple_evaluate(
        model="debiased_hf",
        model_args={"pretrained": pretrained, "collect_features": str(root), **extra},
        tasks=[task],
        task_manager=tm,
        batch_size=batch_size,
    )


def _cmd_export(argv: Sequence[str]) -> int:
    p = OneLineArgumentParser(
        prog="lm-eval-robust export",
        description="Fold a correction into the output layer and save a normal HF checkpoint.",
    )
    p.add_argument("--pretrained", required=True, help="HF model folder (or gemma-3-270m)")
    p.add_argument("--correction", required=True, help="correction file (psi=linear)")
    p.add_argument("--dtype", default=None, help="load/save dtype, e.g. float32 (default: as is)")
    p.add_argument("-o", "--out", required=True)
    args = p.parse_args(list(argv))
    from lm_eval_robust.export import export

    out = export(args.pretrained, args.correction, args.out, args.dtype)
    print(f"wrote {out}")
    return 0


def _cmd_select(argv: Sequence[str]) -> int:
    from lm_eval_robust.select import main as select_main

    return select_main(argv)


def _cmd_lora(argv: Sequence[str]) -> int:
    from lm_eval_robust.lora import main as lora_main

    return lora_main(argv)


def _cmd_replay(argv: Sequence[str]) -> int:
    p = OneLineArgumentParser(
        prog="lm-eval-robust replay",
        description="Apply label-logit corrections to a logged run (--log_samples and "
        "collect_features=DIR) without running the model; writes a run folder for the report.",
    )
    p.add_argument("run", help="the base run's --output_path folder")
    p.add_argument("--features", required=True, help="the base run's collect_features folder")
    p.add_argument(
        "--correction",
        default=None,
        help="correction file or folder (fit -o); without it the run is only rescored (label "
        "scores of a half-precision run recomputed in float32 from its features)",
    )
    p.add_argument("-o", "--out", required=True, help="output folder of the replayed run")
    args = p.parse_args(list(argv))
    from lm_eval_robust.replay import replay

    print(f"wrote {replay(args.run, args.features, args.correction, args.out)}")
    return 0


def _cmd_plan(argv: Sequence[str]) -> int:
    from lm_eval_robust.report.plan_cli import main as plan_main

    return plan_main(argv)


def _cmd_report(argv: Sequence[str]) -> int:
    from lm_eval_robust.report.cli import main as report_main

    return report_main(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "run": _cmd_run,
        "perturb": _cmd_perturb,
        "fit": _cmd_fit,
        "report": _cmd_report,
        "export": _cmd_export,
        "select": _cmd_select,
        "lora": _cmd_lora,
        "replay": _cmd_replay,
        "plan": _cmd_plan,
    }
    if not args or args[0] in ("-h", "--help") or args[0] not in commands:
        print(__doc__.strip())
        print(f"\ncommands: {', '.join(commands)}")
        return 0 if not args or args[0] in ("-h", "--help") else 2
    try:
        return commands[args[0]](args[1:])
    except BrokenPipeError:  # e.g. piped into `head`
        sys.stderr.close()
        return 0
    except UserError as exc:
        print(f"lm-eval-robust: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
