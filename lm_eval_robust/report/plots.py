"""Report figures, drawn on ``matplotlib.figure.Figure`` with the Agg canvas (no pyplot state).

* ``deltas.png``: per-task δ_drop of every run with CIs; with pairs also δ_clean and δ_pert.
* ``certification.png``: Figure 4 style histograms across tasks of Δp_C, Δp_H, ΔP_C, ΔP_H
  (one run: of p_C, p_H, P_C, P_H), the legend giving the share of tasks with Δ > 0.
* ``verification.png``: Figure 5 style bars, BAC of the verification variants of certified and
  uncertified examples per task, before (blue) and after (red).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from lm_eval_robust.report.estimates import LABELS, Estimate, Report, TaskSummary

__all__ = ["plot_certification", "plot_deltas", "plot_verification", "write_plots"]

BEFORE = "#1f77b4"
AFTER = "#d62728"
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _err(values: Sequence[Estimate]) -> tuple[np.ndarray, np.ndarray]:
    v = np.array([e.value for e in values], dtype=float)
    lo = np.array([e.low for e in values], dtype=float)
    hi = np.array([e.high for e in values], dtype=float)
    err = np.vstack([np.nan_to_num(v - lo), np.nan_to_num(hi - v)])
    return v, np.clip(err, 0, None)


def _points(ax: Axes, tasks: Sequence[str], series: list[tuple[str, list[Estimate]]]) -> None:
    y = np.arange(len(tasks))
    n = len(series)
    for i, (label, values) in enumerate(series):
        off = (i - (n - 1) / 2) * min(0.8 / max(n, 1), 0.25)
        v, err = _err(values)
        marker = "os^D"[(i // len(PALETTE)) % 4]  # past six series the colours repeat
        ax.errorbar(
            v, y + off, xerr=err, fmt=marker, ms=4, capsize=2, color=PALETTE[i % 6], label=label
        )
    ax.axvline(0, color="0.5", lw=0.8)
    ax.set_yticks(y, list(tasks))
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)


def plot_deltas(report: Report, path: Path) -> Path:
    """Per-task δ_drop (each run) and, with pairs, δ_clean and δ_pert, with their CIs."""
    tasks = sorted({t.task for t in report.tasks})
    runs = list(dict.fromkeys(t.run for t in report.tasks))
    by = {(t.run, t.task): t for t in report.tasks}
    panels = 2 if report.pairs else 1
    # one point per series per task: grow with the series too (six runs: 10 series per task)
    n_series = max(len(runs), 2 * len({p.other for p in report.pairs}))
    fig = _figure(6.6 * panels, 1.6 + 0.38 * len(tasks) * max(1.0, n_series / 3))
    axes = fig.subplots(1, panels, squeeze=False, sharey=True)[0]
    nan = Estimate(math.nan)
    series = [
        (r, [by[(r, t)].metrics["delta_drop"] if (r, t) in by else nan for t in tasks])
        for r in runs
    ]
    _points(axes[0], tasks, series)
    axes[0].set_xlabel("δ_drop = BAC pert − BAC clean (points)")
    axes[0].set_title("Drop under perturbation")
    axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if report.pairs:
        pairs = {(p.other, p.task): p for p in report.pairs}
        others = list(dict.fromkeys(p.other for p in report.pairs))
        series = []
        for o in others:
            for m in ("delta_clean", "delta_pert"):
                vals = [pairs[(o, t)].metrics[m] if (o, t) in pairs else nan for t in tasks]
                series.append((f"{LABELS[m]} {o}", vals))
        _points(axes[1], tasks, series)
        axes[1].set_xlabel(f"change vs {report.pairs[0].base} (points)")
        axes[1].set_title("Effect of debiasing")
        axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(f"Per-task deltas with {int(100 * report.settings.confidence)}% BCa CIs")
    fig.savefig(path)
    return path


def plot_certification(report: Report, path: Path) -> Path:
    """Histograms across tasks of the certification change (or level, for one run)."""
    names = ("p_c", "p_h", "P_c", "P_h")
    fig = _figure(12, 3.2)
    axes = fig.subplots(1, 4)
    if report.pairs:
        groups = {
            o: [p for p in report.pairs if p.other == o]
            for o in dict.fromkeys(p.other for p in report.pairs)
        }
        for ax, name in zip(axes, names, strict=True):
            key = "d_" + name
            values = {
                o: np.array([r.metrics[key].value for r in rows], dtype=float)
                for o, rows in groups.items()
            }
            bins = _bins(np.concatenate(list(values.values())))
            for i, (o, v) in enumerate(values.items()):
                v = v[np.isfinite(v)]
                share = f"{int((v > 0).sum())}/{v.size}"
                ax.hist(
                    v,
                    bins=bins,
                    alpha=0.6,
                    color=PALETTE[(i + 1) % 6],
                    edgecolor="white",
                    label=f"{o}: Δ>0 in {share} tasks",
                )
            ax.axvline(0, color="0.4", lw=0.8)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel(f"{LABELS[key]} (points)")
            if any(np.isfinite(v).any() for v in values.values()):
                ax.legend(fontsize=7)
            else:
                _say_why_empty(ax, _certificate_reason(report))
        axes[0].set_ylabel("tasks")
        title = f"Effect of debiasing on certification (vs {report.pairs[0].base})"
    elif len(report.tasks) <= FEW_TASKS:
        fig.set_size_inches(12, 1.6 + 0.35 * len(report.tasks))
        for ax, name in zip(axes, names, strict=True):
            _per_task_bars(ax, report, name)
        axes[0].set_yticks(range(len(report.tasks)), [t.task for t in report.tasks], fontsize=8)
        title = "Certification per task"
    else:
        for ax, name in zip(axes, names, strict=True):
            v = np.array([t.metrics[name].value for t in report.tasks], dtype=float)
            v = v[np.isfinite(v)]
            ax.hist(v, bins=10, range=(0, 100), color=BEFORE, alpha=0.8, edgecolor="white")
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel(f"{LABELS[name]} (%)")
            if not v.size:
                _say_why_empty(ax, _certificate_reason(report))
        axes[0].set_ylabel("tasks")
        title = "Certification across tasks"
    fig.suptitle(title)
    fig.savefig(path)
    return path


#: up to this many tasks a run's certification is shown per task rather than as a histogram
FEW_TASKS = 12


def _per_task_bars(ax: Axes, report: Report, name: str) -> None:
    """One bar per task with its value written beside it (``n/a`` where not computable)."""
    v = np.array([t.metrics[name].value for t in report.tasks], dtype=float)
    y = np.arange(len(v))
    ax.barh(y, np.nan_to_num(v), color=BEFORE, alpha=0.8)
    for yi, vi in zip(y, v, strict=True):
        ax.text(
            (vi if math.isfinite(vi) else 0) + 1.5,
            float(yi),
            f"{vi:.1f} %" if math.isfinite(vi) else "n/a",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, 110)
    ax.set_ylim(-0.6, len(v) - 0.4)
    ax.invert_yaxis()
    ax.set_yticks(y, [""] * len(v))
    ax.set_xlabel(f"{LABELS[name]} (%)")
    if not np.isfinite(v).any():
        _say_why_empty(ax, _certificate_reason(report))


def _certificate_reason(report: Report) -> str:
    """Why certificates are not computable, from the first task note that says so."""
    for t in report.tasks:
        for note in t.notes:
            if note.startswith("certificates:") and ("not computable" in note or "need" in note):
                return note.removeprefix("certificates:").strip()
    return "no task has a computable certificate"


def _say_why_empty(ax: Axes, reason: str) -> None:
    """An empty panel says why it is empty instead of showing blank axes."""
    text = "\n".join(textwrap.wrap(f"n/a: {reason}", 34))
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=8)
    ax.set_yticks([])


def _bins(values: np.ndarray) -> np.ndarray:
    """12 equal bins covering the finite values and 0, padded by 5 points."""
    v = values[np.isfinite(values)]
    lo = min(0.0, float(v.min())) - 5.0 if v.size else -5.0
    hi = max(0.0, float(v.max())) + 5.0 if v.size else 5.0
    return np.linspace(lo, hi, 13)


def _ver_value(t: TaskSummary | None, rule: str, certified: bool) -> float:
    v = t.verification.get(rule) if t is not None else None
    if v is None:
        return math.nan
    return 100.0 * (v.bac_certified if certified else v.bac_uncertified)


def plot_verification(report: Report, path: Path) -> Path:
    """Bars per task: BAC of verification variants, certified vs uncertified, before/after."""
    tasks = sorted({t.task for t in report.tasks})
    runs = list(dict.fromkeys(t.run for t in report.tasks))
    by = {(t.run, t.task): t for t in report.tasks}
    shown = runs[:2]  # before (first run) and after (second run)
    colors = (BEFORE, AFTER)
    fig = _figure(max(6.0, 1.0 + 0.9 * len(tasks)), 6.2)
    axes = fig.subplots(2, 1, sharex=True)
    x = np.arange(len(tasks))
    width = 0.8 / (2 * len(shown))
    for ax, rule, name in zip(
        axes, ("c", "h"), ("Chebyshev (p_C)", "Hoeffding (p_H)"), strict=True
    ):
        slot = 0
        for certified in (True, False):
            for i, r in enumerate(shown):
                vals = [_ver_value(by.get((r, t)), rule, certified) for t in tasks]
                pos = x - 0.4 + width * (slot + 0.5)
                bars = ax.bar(
                    pos,
                    np.nan_to_num(vals),
                    width,
                    color=colors[i],
                    alpha=1.0 if certified else 0.35,
                    hatch="" if certified else "//",
                    edgecolor=colors[i],
                    label=f"{r}: {'certified' if certified else 'uncertified'}",
                )
                for b, v in zip(bars, vals, strict=True):
                    if not math.isfinite(v):
                        ax.text(b.get_x() + width / 2, 1, "–", ha="center", fontsize=9)
                slot += 1
        ax.set_ylim(0, 105)
        ax.set_ylabel("BAC of verification variants (%)")
        ax.set_title(name, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8)
    axes[1].set_xticks(x, tasks, rotation=30, ha="right")
    fig.suptitle("Verification of per-example certificates (– : no example in the group)")
    fig.savefig(path)
    return path


def write_plots(report: Report, outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    return [
        plot_deltas(report, outdir / "deltas.png"),
        plot_certification(report, outdir / "certification.png"),
        plot_verification(report, outdir / "verification.png"),
    ]
