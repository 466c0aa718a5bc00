"""``lm-eval-robust leaderboard RUN [RUN ...]``: one row per model, with robustness columns.

Each RUN is one model's ``lm_eval --output_path OUT --log_samples`` folder (e.g. of the preset
``--tasks ni_leaderboard``). Writes leaderboard.md, leaderboard.csv, leaderboard.json, two PNGs
and leaderboard.html (one self-contained page: sortable columns, interval bars, noise marks,
per-task drill-down, paired model differences, the figures) into OUTDIR and prints the Markdown.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lm_eval_robust.base.defaults import DEFAULT_RESAMPLES
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli.args import PROG, CommandParser, check_bootstrap_flags

__all__ = ["LEADERBOARD_FILES", "build_parser", "main"]

#: what a leaderboard folder holds (an existing -o is replaced whole only when it holds nothing
#: else)
LEADERBOARD_FILES = (
    "leaderboard.md",
    "leaderboard.csv",
    "leaderboard.json",
    "leaderboard.html",
    "*.png",
)


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        "leaderboard",
        "One row per model over runs of several models (lm_eval --output_path OUT "
        "--log_samples, one folder per model): clean, perturbed and worst-case BAC, δ_drop, "
        "per-format best/median/worst/spread, consistency, certified and tied shares, each with "
        "a clustered BCa interval; for wrapped stock tasks (<task>_robust_text), first the "
        "task's own metric (acc, exact_match): clean, perturbed, drop, worst case.",
        f"{PROG} leaderboard runs/gemma runs/qwen --labels gemma,qwen -o leaderboard/",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="one run folder per model")
    p.add_argument("--labels", default=None, help="comma-separated model names, one per run")
    p.add_argument("-o", "--out", default="leaderboard", help="output folder")
    p.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples")
    p.add_argument("--confidence", type=float, default=0.95, help="CI level")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument(
        "--splits", type=int, default=50, help="estimation/held-back splits for certificates"
    )
    p.add_argument(
        "--permutations", type=int, default=2000, help="draws of the spread's permutation null"
    )
    p.add_argument("--phi", type=float, default=0.1, help="certificate failure ratio φ")
    p.add_argument("--alpha", type=float, default=0.05, help="certificate error level α")
    p.add_argument("--no_plots", action="store_true", help="skip the PNG figures")
    p.add_argument("--quiet", action="store_true", help="do not print the Markdown")
    return p


def run_leaderboard(args: argparse.Namespace) -> str:
    from lm_eval_robust.base.atomic import (
        StagedDir,
        check_replaceable,
        refuse_overwrite,
        run_inputs,
    )
    from lm_eval_robust.report.leaderboard import build_leaderboard
    from lm_eval_robust.report.leaderboard_tables import to_csv, to_json, to_markdown
    from lm_eval_robust.values.pairing import label_runs

    check_bootstrap_flags(args.resamples, args.confidence, args.seed)
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else None
    refuse_overwrite(args.out, "-o", run_inputs(args.runs))
    check_replaceable(args.out, "-o", "leaderboard", LEADERBOARD_FILES)
    runs = label_runs(args.runs, labels, stock_only=True)
    if args.splits < 1 or args.permutations < 1:
        raise UserError("--splits and --permutations must be >= 1")
    if not (0 < args.phi < 1 and 0 < args.alpha < 1):
        raise UserError("--phi and --alpha must be in (0, 1)")
    lb = build_leaderboard(
        runs,
        args.resamples,
        args.confidence,
        args.seed,
        n_splits=args.splits,
        n_permutations=args.permutations,
        phi=args.phi,
        alpha=args.alpha,
    )
    markdown = to_markdown(lb)
    with StagedDir() as stage:
        out = stage.open(Path(args.out), "leaderboard")
        (out / "leaderboard.md").write_text(markdown, encoding="utf-8")
        (out / "leaderboard.csv").write_text(to_csv(lb), encoding="utf-8")
        (out / "leaderboard.json").write_text(to_json(lb), encoding="utf-8")
        figures: list[Path] = []
        if not args.no_plots:
            from lm_eval_robust.report.leaderboard_plots import write_leaderboard_plots

            figures = write_leaderboard_plots(lb, out)
        from lm_eval_robust.report.leaderboard_html import to_html

        (out / "leaderboard.html").write_text(to_html(lb, figures), encoding="utf-8")
        stage.commit(out / "leaderboard.md")
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        markdown = run_leaderboard(args)
    except UserError as exc:
        print(f"lm-eval-robust leaderboard: error: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(markdown)
    print(
        f"\nwrote {Path(args.out) / 'leaderboard.md'} (+ .csv, .json, .html, PNGs)", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
