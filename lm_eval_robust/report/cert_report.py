"""The report's certificate section: every rule over repeated splits, with its held-back check.

Per run and task, :func:`certificate_summaries` runs :func:`~lm_eval_robust.stats.cert_splits.
split_flags` on the task's per-doc items and summarizes each rule (the finite-sample certificate
first, then the paper's plug-in p_C and p_H labelled with their K); :func:`render` writes the
Markdown table the report and the leaderboard share in spirit: rate with its interval over
examples and splits, the range of single-split rates, held-back accuracy of certified and
uncertified examples, their difference with its interval, the share of certified examples below
1 − φ beside what certificates all at 1 − φ would show, and the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lm_eval_robust.stats.cert_splits import RULES, RuleSummary, split_flags, summarize

__all__ = ["certificate_summaries", "render"]


def certificate_summaries(
    items: Iterable[Mapping[str, Any]],
    n_splits: int = 50,
    phi: float = 0.1,
    alpha: float = 0.05,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, RuleSummary]:
    """Every rule of :data:`RULES` on one task's items (those with label scores); empty when
    none has them, or when its docs have different numbers of choices (no one label margin)."""
    from lm_eval_robust.stats.margins import MarginTable, label_counts

    scored = [it for it in items if it.get("ll") is not None]
    if not scored or len(label_counts(scored)) > 1:
        return {}  # no label scores, or docs with different numbers of choices: no margin
    flags = split_flags(MarginTable.from_items(scored), n_splits, phi, alpha)
    return {rule: summarize([flags[rule]], phi, n_resamples, confidence, seed) for rule in RULES}


def _pct(x: float, signed: bool = False) -> str:
    if not math.isfinite(x):
        return "–"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def _interval(v: float, lo: float, hi: float, signed: bool = False) -> str:
    text = _pct(v, signed)
    if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
        text += f" [{_pct(lo, signed)}, {_pct(hi, signed)}]"
    return text


def render(rows: Sequence[tuple[str, str, RuleSummary]], phi: float, n_splits: int) -> list[str]:
    """Markdown lines: one row per (run, task, rule)."""
    if not rows:
        return []
    out = [
        f"φ = {phi}; rates averaged over {n_splits} random estimation/held-back splits of each "
        "example's variants, the interval redrawing examples and the split. *exact*: the "
        "finite-sample certificate (exact binomial bound on the example's accuracy under "
        "perturbation, Benjamini–Hochberg), n/a below the K it needs; *plug-in*: the paper's "
        "estimator at the run's K, an estimate without a finite-sample guarantee.",
        "",
        "| run | task | rule | certified | single-split range | held-back acc. certified / "
        "uncertified | certified − uncertified | certified below 1−φ (bound) | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run, task, c in rows:
        if not c.available:
            out.append(f"| {run} | {task} | {c.label} | {c.reason} | | | | | n/a |")
            continue
        below = (
            "–"
            if not math.isfinite(c.share_below)
            else f"{_pct(c.share_below)} (≤ {_pct(c.share_below_bound)})"
        )
        out.append(
            f"| {run} | {task} | {c.label} | {_interval(c.rate, c.rate_low, c.rate_high)} | "
            f"{_pct(c.split_min)}–{_pct(c.split_max)} | {_pct(c.acc_certified)} / "
            f"{_pct(c.acc_uncertified)} | {_interval(c.diff, c.diff_low, c.diff_high, True)} | "
            f"{below} | {c.verdict} |"
        )
    return out
