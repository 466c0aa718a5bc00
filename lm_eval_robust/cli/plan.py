"""``lm-eval-robust plan RUN [OTHER]``: sample sizes from a pilot run (report.plan)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lm_eval_robust.base.atomic import refuse_overwrite, run_inputs, write_text
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli.args import PROG, CommandParser, check_resamples, check_seed
from lm_eval_robust.report.leaderboard import format_share
from lm_eval_robust.report.plan import (
    PlanRow,
    PlanSettings,
    plan_drop,
    plan_mean,
    plan_pair,
    to_markdown,
)
from lm_eval_robust.stats.margins import MarginTable, label_counts
from lm_eval_robust.stats.robustness import RobustTable
from lm_eval_robust.values.pairing import label_runs, pair_runs

__all__ = ["K_MAX", "build_parser", "main"]

#: perturbations per example a plan may assume (the paper uses 200)
K_MAX = 100_000


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(
            f"--k takes comma-separated integers, e.g. 20,50,200; got {text!r}"
        ) from None


def build_parser() -> CommandParser:
    p = CommandParser(
        "plan",
        "How many source examples (at K perturbations each) a task needs before an effect of "
        "--effect points is significant, from a pilot run. One run: its perturbation drop. "
        "Two runs (base, other): the change of perturbed BAC, paired by doc.",
        f"{PROG} plan runs/pilot runs/debiased --effect 1",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="pilot run folder(s): base [other]")
    p.add_argument("--effect", type=float, default=1.0, help="effect to detect, points of BAC")
    p.add_argument("--alpha", type=float, default=0.05, help="two-sided test level")
    p.add_argument("--power", type=float, default=0.8, help="power of the test")
    p.add_argument("--k", default="20,50,100,200", help="perturbations per example to plan for")
    p.add_argument("--resamples", type=int, default=2000, help="two-stage bootstrap resamples")
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        help="prompts a task may cost (clean ones included): also show the smallest effect "
        "each K detects at that cost, and the size to run",
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--tasks", default=None, help="comma-separated tasks to keep (default: all)")
    p.add_argument("-o", "--out", default=None, help="also write the Markdown table here")
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    if len(args.runs) > 2:
        raise UserError(f"plan takes one run or a pair (base, other); got {len(args.runs)} runs")
    check_resamples(args.resamples)
    check_seed(args.seed)
    ks = _ints(args.k)
    if ks and max(ks) > K_MAX:
        raise UserError(f"--k values must be between 1 and {K_MAX:,}; got {max(ks)}")
    if not 0 < args.effect <= 100:
        raise UserError(
            f"--effect must be positive and at most 100 points of BAC; got {args.effect}"
        )
    if args.out:
        out = Path(args.out)
        if out.is_dir():
            raise UserError(f"-o {out} is a folder; give a file name, e.g. {out / 'plan.md'}")
        refuse_overwrite(out, "-o", run_inputs(args.runs))
    try:
        settings = PlanSettings(
            effect=args.effect,
            alpha=args.alpha,
            power=args.power,
            ks=ks,
            n_resamples=args.resamples,
            seed=args.seed,
            budget=args.budget,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    runs = label_runs(args.runs, None)
    keep = {t.strip() for t in args.tasks.split(",")} if args.tasks else None
    rows: list[PlanRow] = []
    kinds: dict[str, str] = {}  # task -> perturbation kind, for the mean rows
    skipped: list[str] = []
    try:
        if len(runs) == 1:
            for name in sorted(runs[0].tasks):
                if keep is None or name in keep:
                    # a RobustTable also holds docs with different numbers of choices
                    items = runs[0].tasks[name].item_list()
                    table = RobustTable.from_items(items, certificates=False)
                    rows.append(plan_drop(table, name, settings))
                    kinds[name] = _mean_kind(runs[0].tasks[name].kind, items)
        else:
            paired, _ = pair_runs(runs[0], runs[1])
            for pt in paired:
                if keep is None or pt.task in keep:
                    a_items, b_items = pt.base.item_list(), pt.other.item_list()
                    if len(label_counts(a_items)) > 1:
                        skipped.append(pt.task)
                        continue
                    a = MarginTable.from_items(a_items)
                    b = MarginTable.from_items(b_items)
                    rows.append(plan_pair(a, b, pt.task, settings))
                    kinds[pt.task] = _mean_kind(pt.base.kind, a_items)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if skipped:
        print(
            f"{PROG} plan: left out {', '.join(skipped)}: their docs have different numbers of "
            "choices, so the two runs' answers cannot be paired label by label; plan one run "
            "at a time",
            file=sys.stderr,
        )
    if not rows:
        if skipped:
            raise UserError("no task left to plan: every one has docs with different choices")
        raise UserError(f"no task of the run(s) matches --tasks {args.tasks}")
    rows += _mean_rows(rows, kinds, settings)
    label = " vs ".join(r.label for r in runs)
    markdown = to_markdown(rows, settings, label)
    crossed = sorted(
        t for t in kinds if t in runs[0].tasks and runs[0].tasks[t].design == "crossed"
    )
    if crossed:
        print(
            f"{PROG} plan: the pilot is crossed ({len(crossed)} of {len(kinds)} tasks); the sizes "
            "assume the nested design: run them with design nested",
            file=sys.stderr,
        )
        markdown += "\n" + CROSSED_NOTE + "\n"
    print(markdown)
    if args.out:
        write_text(markdown, args.out, "the plan")
    return 0


#: why a size planned from a crossed pilot is run nested
CROSSED_NOTE = (
    "Design: the pilot is crossed (the j-th perturbation of every example is the same format or "
    "text kind). These sizes treat an example's K variants as independent draws, which is the "
    "nested design (each example draws its own). A crossed run at a small K measures only K "
    "formats (text kinds) per task, the same for every example: run the size chosen here with "
    'design nested (`--metadata \'{"design": "nested"}\'`), or crossed with K at least the '
    "number of variants to compare."
)


def _mean_kind(kind: str, items: list[dict[str, Any]]) -> str:
    """The kind whose mean row a task joins: none ("") for a format task none of whose prompts
    had parts to reformat (all its perturbations are text ones), as the leaderboard's means."""
    return "" if kind == "format" and format_share(items) == 0.0 else kind


def _mean_rows(rows: list[PlanRow], kinds: dict[str, str], settings: PlanSettings) -> list[PlanRow]:
    """Per perturbation kind with two tasks or more, the mean over its tasks (the leaderboard's
    mean row), sized per task."""
    by_kind: dict[str, list[PlanRow]] = {}
    for r in rows:
        if kinds.get(r.task):
            by_kind.setdefault(kinds[r.task], []).append(r)
    return [
        plan_mean(group, f"mean over {len(group)} tasks ({kind})", settings)
        for kind, group in by_kind.items()
        if len(group) > 1
    ]
