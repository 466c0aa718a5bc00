"""Leaderboard figures (Agg canvas, no pyplot state).

* ``leaderboard_bac.png``: per perturbation kind, every model's clean, perturbed and worst-case
  BAC (mean over tasks) with their clustered CIs, and each model's chance level (a uniform random
  pick: 50 % on binary tasks, less where tasks have more choices).
* ``leaderboard_variants.png``: per kind and task, the distribution of per-variant BAC (one box per
  model; a point per format or text-perturbation kind): the spread across prompt formats, with
  each task's chance level.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lm_eval_robust.report.leaderboard import MEAN, Leaderboard, LeaderboardRow
from lm_eval_robust.tasks.wrap.names import parse as parse_variant

__all__ = ["plot_bac", "plot_variants", "write_leaderboard_plots"]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
SERIES = (
    ("bac_clean", "clean", "o"),
    ("bac_pert", "perturbed", "s"),
    ("bac_worst", "worst case", "v"),
)


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _short(task: str) -> str:
    """A task's tick label: a wrapped stock task's own name (``date_understanding`` for
    ``bigbench_date_understanding_multiple_choice_robust_text``), else its id (``ni065``)."""
    variant = parse_variant(task)
    if variant is not None:
        return variant.base.removeprefix("bigbench_").removesuffix("_multiple_choice")
    return task.split("_", 1)[0]


def _chance(row: LeaderboardRow | None) -> float:
    """The row's chance level in %, NaN where unknown (no row, or no label scores)."""
    return 100 * row.chance if row is not None and math.isfinite(row.chance) else math.nan


def plot_bac(lb: Leaderboard, path: Path) -> None:
    n = len(lb.kinds)
    fig = _figure(6.0 * n, 0.9 + 0.55 * len(lb.models))
    axes = fig.subplots(1, n, squeeze=False)[0]
    y = np.arange(len(lb.models))
    for ax, kind in zip(axes, lb.kinds, strict=True):
        for j, (metric, label, marker) in enumerate(SERIES):
            vals, errs = [], []
            for m in lb.models:
                r = lb.row(m, kind)
                c = r.cells[metric] if r is not None else None
                v = 100 * c.value if c is not None and math.isfinite(c.value) else np.nan
                lo = 100 * c.low if c is not None and math.isfinite(c.low) else v
                hi = 100 * c.high if c is not None and math.isfinite(c.high) else v
                vals.append(v)
                errs.append((max(v - lo, 0.0), max(hi - v, 0.0)))
            err = np.array(errs, dtype=float).T if errs else None
            ax.errorbar(
                vals,
                y + (j - 1) * 0.22,
                xerr=err,
                fmt=marker,
                ms=5,
                capsize=2,
                color=PALETTE[j],
                label=label,
            )
        chance = [_chance(lb.row(m, kind)) for m in lb.models]
        if any(math.isfinite(c) for c in chance):
            ax.vlines(
                chance,
                y - 0.42,
                y + 0.42,
                color="0.45",
                lw=1.0,
                ls=":",
                label="chance (random pick)",
            )
        ax.set_yticks(y, list(lb.models))
        ax.invert_yaxis()
        ax.set_xlabel("BAC, mean over tasks (%)")
        ax.set_title(f"{kind} perturbations")
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    fig.suptitle(f"Clean, perturbed and worst-case BAC ({int(100 * lb.confidence)} % CIs)")
    fig.savefig(path)


def plot_variants(lb: Leaderboard, path: Path) -> None:
    n = len(lb.kinds)
    tasks_by_kind = {
        k: sorted({r.task for r in lb.rows if r.kind == k and r.task != MEAN}) for k in lb.kinds
    }
    width = max(6.0, 0.9 * max(len(t) for t in tasks_by_kind.values()) * max(1, len(lb.models)) / 2)
    fig = _figure(width, 3.2 * n)
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    nm = len(lb.models)
    for ax, kind in zip(axes, lb.kinds, strict=True):
        tasks = tasks_by_kind[kind]
        drawn = False
        for i, m in enumerate(lb.models):
            data, pos = [], []
            for t, task in enumerate(tasks):
                r = lb.row(m, kind, task)
                if r is None or not r.variants or not math.isfinite(r.cells["fmt_spread"].value):
                    continue  # no variants, or one prompt per example (K = 1): no spread to show
                data.append([100 * v for v in r.variants.values()])
                pos.append(t + (i - (nm - 1) / 2) * 0.8 / nm)
            if not data:
                continue
            drawn = True
            box = ax.boxplot(
                data,
                positions=pos,
                widths=0.7 / nm,
                patch_artist=True,
                showfliers=False,
                manage_ticks=False,
            )
            for patch in box["boxes"]:
                patch.set_facecolor(PALETTE[i % len(PALETTE)])
                patch.set_alpha(0.35)
            for p, d in zip(pos, data, strict=True):
                ax.plot([p] * len(d), d, ".", ms=3, color=PALETTE[i % len(PALETTE)])
        ax.set_xticks(
            range(len(tasks)), [_short(t) for t in tasks], fontsize=8, rotation=25, ha="right"
        )
        # a task's chance level (its models share its docs): the first model's that has one
        for t, task in enumerate(tasks):
            levels = [_chance(lb.row(m, kind, task)) for m in lb.models]
            level = next((c for c in levels if math.isfinite(c)), math.nan)
            if math.isfinite(level):
                ax.hlines(level, t - 0.45, t + 0.45, color="0.45", lw=1.0, ls=":")
        if not drawn:
            ax.text(
                0.5,
                0.5,
                "n/a: one perturbed prompt per example (K = 1), no two variants share an example",
                transform=ax.transAxes,
                ha="center",
                va="center",
                color="0.35",
            )
        ax.set_ylabel("BAC per variant (%)")
        ax.set_title(
            f"{kind} perturbations: BAC of each "
            + ("format" if kind == "format" else "text-perturbation kind")
        )
        ax.grid(axis="y", alpha=0.3)
    handles = [
        axes[0].plot([], [], "s", color=PALETTE[i % len(PALETTE)], alpha=0.6, label=m)[0]
        for i, m in enumerate(lb.models)
    ]
    fig.legend(handles=handles, loc="outside upper center", ncols=min(nm, 6), fontsize=8)
    fig.savefig(path)


def write_leaderboard_plots(lb: Leaderboard, out: Path) -> list[Path]:
    paths = [out / "leaderboard_bac.png", out / "leaderboard_variants.png"]
    plot_bac(lb, paths[0])
    plot_variants(lb, paths[1])
    return paths
