"""Leaderboard figures (Agg canvas, no pyplot state).

* ``leaderboard_bac.png``: per perturbation kind, every model's clean, perturbed and worst-case
  BAC (mean over tasks) with their clustered CIs.
* ``leaderboard_variants.png``: per kind and task, the distribution of per-variant BAC (one box per
  model; a point per format or text-perturbation kind): the spread across prompt formats.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lm_eval_robust.report.leaderboard import MEAN, Leaderboard

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
        ax.axvline(50, color="0.6", lw=0.8, ls=":")
        ax.set_yticks(y, list(lb.models))
        ax.invert_yaxis()
        ax.set_xlabel("BAC, mean over tasks (%)")
        ax.set_title(f"{kind} perturbations")
        ax.grid(axis="x", alpha=0.3)
    axes[0].legend(loc="lower left", fontsize=8)
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
        for i, m in enumerate(lb.models):
            data, pos = [], []
            for t, task in enumerate(tasks):
                r = lb.row(m, kind, task)
                if r is None or not r.variants:
                    continue
                data.append([100 * v for v in r.variants.values()])
                pos.append(t + (i - (nm - 1) / 2) * 0.8 / nm)
            if not data:
                continue
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
        ax.set_xticks(range(len(tasks)), [t.split("_", 1)[0] for t in tasks], fontsize=8)
        ax.axhline(50, color="0.6", lw=0.8, ls=":")
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
