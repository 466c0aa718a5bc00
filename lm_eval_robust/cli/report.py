"""``lm-eval-robust report RUN [RUN ...]``: robustness tables, paired comparisons and plots.

One run: robustness columns per task. Two: the second compared with the first (e.g. base,
debiased), paired by example. More: each compared with the first. Writes report.md, report.csv,
report.json and PNGs into OUTDIR and prints the Markdown.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from lm_eval_robust.base.defaults import DEFAULT_CERT_PHI, DEFAULT_CERT_PSI, DEFAULT_RESAMPLES
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli.args import PROG, CommandParser, check_bootstrap_flags
from lm_eval_robust.report.estimates import ReportSettings, build_report
from lm_eval_robust.report.tables import to_csv, to_json, to_markdown
from lm_eval_robust.stats.certificates import DEFAULT_ESTIMATOR, ESTIMATORS, CertConfig
from lm_eval_robust.values.pairing import label_runs

__all__ = ["REPORT_FILES", "build_parser", "main"]

#: what a report folder holds (an existing -o is replaced whole only when it holds nothing else)
REPORT_FILES = ("report.md", "report.csv", "report.json", "*.png")


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        "report",
        "Robustness report over lm_eval runs of our tasks (run with --output_path OUT "
        "--log_samples). Give OUT, OUT/<model>, or a results_*.json file per run.",
        f"{PROG} report runs/base runs/debiased --labels base,debiased -o report/",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders; the first is the base")
    p.add_argument("--labels", default=None, help="comma-separated run names, e.g. base,debiased")
    p.add_argument("-o", "--out", default="robustness_report", help="output folder")
    p.add_argument(
        "--tasks",
        default=None,
        help="tasks to keep: a comma list or select's targets .json (default: all); a task's "
        "_train/_holdout splits count as the task",
    )
    p.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples")
    p.add_argument("--confidence", type=float, default=0.95, help="CI level")
    p.add_argument(
        "--phi", type=float, default=DEFAULT_CERT_PHI, help="certificate failure ratio φ"
    )
    p.add_argument("--psi", type=float, default=DEFAULT_CERT_PSI, help="population confidence ψ")
    p.add_argument("--seed", type=int, default=0, help="bootstrap and split seed")
    p.add_argument(
        "--certificate",
        choices=sorted(ESTIMATORS),
        default=DEFAULT_ESTIMATOR,
        help="estimator behind p_C/p_H/P_C/P_H and their CIs (the report's certificate check "
        "shows every estimator with its held-back verification)",
    )
    p.add_argument(
        "--eps_rule",
        choices=["order", "zero"],
        default=None,
        help="override the estimator's out-of-box mass: 'order' 1/(n+1), 'zero' (paper)",
    )
    p.add_argument(
        "--density_rule",
        choices=["histogram", "uniform"],
        default=None,
        help="override the estimator's C·V_B: histogram density ratio, or 1 (paper)",
    )
    p.add_argument(
        "--chebyshev",
        choices=["reference", "empirical"],
        default="reference",
        help="Cantelli on the uniform reference (paper) or on the shifts' own mean/variance",
    )
    p.add_argument(
        "--splits",
        type=int,
        default=50,
        help="random estimation/held-back splits for the certificate rates and their check "
        "(0: leave that section out)",
    )
    p.add_argument(
        "--alpha", type=float, default=0.05, help="the finite-sample certificate's error level α"
    )
    p.add_argument("--no_plots", action="store_true", help="skip the PNG figures")
    p.add_argument("--quiet", action="store_true", help="do not print the Markdown")
    return p


def _settings(args: argparse.Namespace) -> ReportSettings:
    check_bootstrap_flags(args.resamples, args.confidence, args.seed)
    try:
        named = CertConfig.named(args.certificate, phi=args.phi, psi=args.psi, seed=args.seed)
        cert = replace(
            named,
            eps_rule=args.eps_rule or named.eps_rule,
            density_rule=args.density_rule or named.density_rule,
            chebyshev=args.chebyshev,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.splits < 0:
        raise UserError(f"--splits must be >= 0; got {args.splits}")
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha must be in (0, 1); got {args.alpha}")
    return ReportSettings(
        n_resamples=args.resamples,
        confidence=args.confidence,
        seed=args.seed,
        cert=cert,
        n_splits=args.splits,
        alpha=args.alpha,
    )


def run_report(args: argparse.Namespace) -> str:
    """Build the report for parsed arguments, write its files, return the Markdown."""
    from lm_eval_robust.base.atomic import (
        StagedDir,
        check_replaceable,
        refuse_overwrite,
        run_inputs,
    )

    settings = _settings(args)
    inputs = run_inputs(args.runs)
    if args.tasks and args.tasks.endswith(".json"):
        inputs.append(("targets file", args.tasks))
    refuse_overwrite(args.out, "-o", inputs)
    check_replaceable(args.out, "-o", "report", REPORT_FILES)
    with StagedDir() as stage:
        out = stage.open(Path(args.out), "report")
        markdown = _write_report(args, settings, out)
        stage.commit(out / "report.md")
    return markdown


def _write_report(args: argparse.Namespace, settings: Any, out: Path) -> str:
    """Build the report and write its files into ``out``; returns the Markdown."""
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else None
    runs = label_runs(args.runs, labels)
    if args.tasks:
        from lm_eval_robust.report.targets import read_task_list
        from lm_eval_robust.scoring.correction import correction_key

        keep = set(read_task_list(args.tasks))
        runs = [
            replace(r, tasks={k: v for k, v in r.tasks.items() if {k, correction_key(k)} & keep})
            for r in runs
        ]
        empty = [r.label for r in runs if not r.tasks]
        if empty:
            raise UserError(f"runs {', '.join(empty)} have none of --tasks {args.tasks}")
    report = build_report(runs, settings)
    markdown = to_markdown(report)
    (out / "report.md").write_text(markdown, encoding="utf-8")
    (out / "report.csv").write_text(to_csv(report), encoding="utf-8")
    (out / "report.json").write_text(to_json(report), encoding="utf-8")
    if not args.no_plots:
        from lm_eval_robust.report.plots import write_plots

        write_plots(report, out)
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        markdown = run_report(args)
    except UserError as exc:
        print(f"lm-eval-robust report: error: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(markdown)
    extra = ".csv, .json" if args.no_plots else ".csv, .json, PNGs"
    print(f"\nwrote {Path(args.out) / 'report.md'} (+ {extra})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
