"""The mean rows of a wrapped-task leaderboard as the results READMEs quote them, one Markdown
table per perturbation kind, from ``leaderboard.json`` (`lm-eval-robust leaderboard` wrote it):

    python scripts/wrap_mean_rows.py results/wrap_bigbench_n64/leaderboard

Columns: examples, the stock metric (``acc``) clean, perturbed and their drop, clean BAC, δ_drop,
worst-case BAC, consistency (in %, 95 % clustered BCa intervals), and the spread across variants
with the mean and p-value of its permutation null.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def cell(c: dict[str, Any], signed: bool = False) -> str:
    """``value [low, high]`` in %, minus signs typeset; no interval where resamples never vary."""
    f = "{:+.1f}" if signed else "{:.1f}"
    text = f.format(100 * c["value"])
    if c.get("low") is not None and c.get("high") is not None and c["high"] > c["low"]:
        text += f" [{f.format(100 * c['low'])}, {f.format(100 * c['high'])}]"
    return text.replace("-", "−")


def spread(c: dict[str, Any], null: dict[str, Any]) -> str:
    """``spread (null mean, p)``; n/a where the leaderboard has none (one prompt per example)."""
    if c.get("value") is None or null.get("fmt_spread_p") is None:
        return "n/a"
    return (
        f"{100 * c['value']:.1f} ({100 * null['fmt_spread_null_mean']:.1f}, "
        f"p {null['fmt_spread_p']:.2f})"
    )


def mean_tables(board: dict[str, Any], metric: str = "acc") -> str:
    out = []
    kinds = dict.fromkeys(r["kind"] for r in board["rows"] if r["task"] == "mean")
    for kind in kinds:
        rows = [r for r in board["rows"] if r["task"] == "mean" and r["kind"] == kind]
        n_tasks = sorted({r["n_tasks"] for r in rows})
        out.append(
            f"**{kind} perturbations, mean over the {'/'.join(map(str, n_tasks))} tasks** "
            "(in %, 95 % clustered BCa intervals):"
        )
        out.append("")
        out.append(
            f"| model | examples | {metric} clean | {metric} perturbed | {metric} drop | clean BAC "
            "| δ_drop (BAC) | worst-case BAC | consistency | spread (null mean, p) |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            st, m, sn = r["stock"][metric]["metrics"], r["metrics"], r["spread_null"]
            out.append(
                f"| {r['model']} | {r['n_examples']} | {cell(st['clean'])} | {cell(st['pert'])} | "
                f"{cell(st['drop'], True)} | {cell(m['bac_clean'])} | "
                f"{cell(m['delta_drop'], True)} | {cell(m['bac_worst'])} | "
                f"{cell(m['consistency'])} | {spread(m['fmt_spread'], sn)} |"
            )
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("leaderboard", type=Path, help="folder holding leaderboard.json")
    ap.add_argument("--metric", default="acc", help="the stock metric's label (default: acc)")
    args = ap.parse_args(argv)
    path = args.leaderboard / "leaderboard.json"
    try:
        board = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(
            f"wrap_mean_rows: cannot read {path} ({exc}); give the leaderboard's -o folder",
            file=sys.stderr,
        )
        return 2
    print(mean_tables(board, args.metric))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
