"""``lm-eval-robust select``: the paper's target-task filters
(:mod:`lm_eval_robust.report.targets`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lm_eval_robust.base.atomic import refuse_overwrite, run_inputs, write_text
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli.args import PROG, CommandParser, check_resamples
from lm_eval_robust.report.targets import (
    PASS_METADATA,
    PASS_TASKS,
    Criteria,
    candidates,
    target_tasks,
    to_markdown,
)

__all__ = ["build_parser", "check_pass_tasks", "main"]


def check_pass_tasks(tasks: str) -> None:
    """Every name of ``--tasks`` must be one of our tasks or tags (one line, before any model)."""
    from lm_eval_robust.base.validate import nearest
    from lm_eval_robust.cli.args import known_tasks

    known = known_tasks()
    for name in (t.strip() for t in tasks.split(",")):
        if name and name not in known:
            near = nearest(name, known)
            hint = f"did you mean {near!r}? " if near else ""
            raise UserError(
                f"unknown task {name!r} in --tasks; {hint}(e.g. {PASS_TASKS}, or ni065_format_pert)"
            )


def build_parser() -> CommandParser:
    p = CommandParser(
        "select",
        "Apply the paper's target-task filters to a run of our perturbed tasks.",
        f"{PROG} select runs/pilot --min_clean_bac 0.7 -o targets.json",
    )
    p.add_argument("run", nargs="*", help="lm_eval --output_path folder(s) (with --log_samples)")
    g = p.add_argument_group("running the screening pass first (instead of RUN)")
    g.add_argument("--pretrained", default=None, help="model folder or embedded name")
    g.add_argument("--model_args", default="", help="more debiased_hf arguments, k=v,k=v")
    g.add_argument("--tasks", default=PASS_TASKS, help="tasks of the pass")
    g.add_argument("--metadata", default=PASS_METADATA, help="task settings of the pass, JSON")
    g.add_argument("--batch_size", default="8", help="prompts per forward pass")
    g.add_argument("--apply_chat_template", action="store_true", help="chat prompt style")
    g.add_argument(
        "--output_path", default=None, help="where the pass is written (default: beside -o)"
    )
    p.add_argument(
        "--min_clean_bac", type=float, default=0.70, help="clean BAC a target needs (fraction)"
    )
    p.add_argument(
        "--min_drop", type=float, default=0.01, help="drop a target needs (fraction of BAC)"
    )
    p.add_argument(
        "--significant",
        action="store_true",
        help="the drop's whole CI must lie beyond --min_drop (with --min_drop 0: exclude 0)",
    )
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("-o", "--out", default=None, help="write targets JSON (+ .md beside it)")
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    check_resamples(args.resamples)
    if not 0 <= args.min_clean_bac <= 1 or not 0 <= args.min_drop <= 1:
        raise UserError(
            "--min_clean_bac and --min_drop must be fractions in [0, 1] (0.7, 0.01); got "
            f"{args.min_clean_bac} and {args.min_drop}"
        )
    if bool(args.run) == bool(args.pretrained):
        raise UserError(
            "give either run folders or --pretrained MODEL (to run the screening pass first)"
        )
    if args.pretrained:
        check_pass_tasks(args.tasks)
    crit = Criteria(args.min_clean_bac, args.min_drop, args.significant)
    outs = _outputs(args)
    runs = list(args.run) or [_screening_pass(args)]
    rows = candidates(runs, crit, args.resamples)
    md = to_markdown(rows, crit, ", ".join(runs))
    print(md)
    if outs:
        payload = {
            "runs": runs,
            "criteria": asdict(crit),
            "targets": target_tasks(rows),
            "table": [{**asdict(r), "target": r.target} for r in rows],
        }
        write_text(json.dumps(payload, indent=2) + "\n", outs[0], "the targets")
        write_text(md, outs[1], "the targets table")
    return 0


def _outputs(args: Any) -> list[Path]:
    """``-o`` and the ``.md`` beside it, checked against every input before any work."""
    if not args.out:
        return []
    out = Path(args.out)
    if out.suffix == ".md":
        raise UserError(
            f"-o {out} ends in .md, the name of the table written beside the targets; give the "
            "targets a .json name, e.g. targets.json"
        )
    if out.is_dir():
        raise UserError(f"-o {out} is a folder; give a file name, e.g. {out / 'targets.json'}")
    if out.parent.exists() and not out.parent.is_dir():
        raise UserError(f"cannot write {out}: {out.parent} is a file; choose -o")
    inputs = run_inputs(args.run)
    if args.pretrained:
        inputs.append(("model folder", args.pretrained))
    outs = [out, out.with_suffix(".md")]
    for o in outs:
        refuse_overwrite(o, "-o", inputs)
    if args.pretrained:
        refuse_overwrite(_pass_folder(args), "--output_path", [("model folder", args.pretrained)])
        for o in outs:
            refuse_overwrite(o, "-o", [("screening run", _pass_folder(args))])
    return outs


def _pass_folder(args: Any) -> Path:
    if args.output_path:
        return Path(args.output_path)
    return (Path(args.out).parent if args.out else Path(".")) / "select_run"


def _screening_pass(args: Any) -> str:
    """Run the clean + small perturbed pass of ``args.tasks`` and return its output folder."""
    from lm_eval_robust.cli.run import main as run_main

    folder = _pass_folder(args)
    model_args = f"pretrained={args.pretrained}" + (
        f",{args.model_args}" if args.model_args else ""
    )
    argv = ["--model", "debiased_hf", "--model_args", model_args, "--tasks", args.tasks]
    argv += ["--metadata", args.metadata, "--batch_size", str(args.batch_size)]
    argv += ["--output_path", str(folder), "--log_samples"]
    if args.apply_chat_template:
        argv.append("--apply_chat_template")
    rc = run_main(argv)
    if rc != 0:
        raise UserError(f"the screening pass stopped (exit {rc}); see the messages above")
    return str(folder)
