"""One row per model: the leaderboard table over runs of several models.

Each run (an ``lm_eval --output_path OUT --log_samples`` folder) is one model. For every task of a
run, and for the mean over the tasks of each perturbation kind, the table gives the measures of
:mod:`lm_eval_robust.metrics.robustness` with clustered BCa intervals (examples resampled with all
their variants, ``n_resamples`` times):

* per task: the task's own bootstrap;
* the mean over tasks: every task is resampled independently (a stratified bootstrap), so the
  mean's resamples are the means of the tasks' resamples, and its jackknife leaves out one example
  of one task at a time. Tasks where a measure is undefined are left out of that measure's mean,
  and the row says how many tasks it averages. The mean is over the tasks every model ran (a
  model that cannot score a task, e.g. labels that are not single tokens for its tokenizer, takes
  that task out of every model's mean, with a note), so the rows compare like with like.

Rows are keyed by (model, kind, task); ``task == "mean"`` is the average. Values are fractions in
the JSON and CSV, percentages in the Markdown.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lm_eval_robust.errors import UserError
from lm_eval_robust.metrics.bootstrap import bca_interval
from lm_eval_robust.metrics.robustness import (
    BOOTSTRAP_STATS,
    Replicates,
    RobustTable,
    replicates,
    table_of,
    variant_bac,
)
from lm_eval_robust.report.markdown import markdown_table
from lm_eval_robust.report.pairing import PROTOCOL_KEYS, Run, protocol_settings

__all__ = [
    "COLUMNS",
    "Cell",
    "Leaderboard",
    "LeaderboardRow",
    "build_leaderboard",
    "to_csv",
    "to_json",
    "to_markdown",
]

MEAN = "mean"

#: the leaderboard's columns, in order, with their Markdown headers
COLUMNS: dict[str, str] = {
    "bac_clean": "clean BAC",
    "bac_pert": "perturbed BAC",
    "delta_drop": "δ_drop",
    "bac_worst": "worst-case BAC",
    "fmt_best": "best variant",
    "fmt_median": "median variant",
    "fmt_worst": "worst variant",
    "fmt_spread": "spread",
    "consistency": "consistency",
    "p_cert_h": "certified (p_H)",
    "tie_share": "tied",
    "maj_share_clean": "majority share (clean)",
}


class LeaderboardError(UserError):
    """Runs that cannot make one leaderboard; the message names the problem and the fix."""


@dataclass(frozen=True)
class Cell:
    value: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float | None]:
        def clean(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"value": clean(self.value), "low": clean(self.low), "high": clean(self.high)}


@dataclass(frozen=True)
class LeaderboardRow:
    model: str
    kind: str
    task: str
    n_examples: int
    n_prompts: int
    n_tasks: int
    cells: Mapping[str, Cell]
    variants: Mapping[str, float] = field(default_factory=dict)  # per-variant BAC (tasks only)


@dataclass(frozen=True)
class Leaderboard:
    rows: tuple[LeaderboardRow, ...]
    models: tuple[str, ...]
    kinds: tuple[str, ...]
    n_resamples: int
    confidence: float
    designs: Mapping[str, str]  # task -> design
    notes: tuple[str, ...] = ()

    def row(self, model: str, kind: str, task: str = MEAN) -> LeaderboardRow | None:
        for r in self.rows:
            if (r.model, r.kind, r.task) == (model, kind, task):
                return r
        return None


def _base_task(task: str) -> str:
    """``ni065_format_lb`` / ``ni065_format_pert`` -> ``ni065``; a wrapped stock task
    (``<task>_robust_text``) -> ``<task>``."""
    from lm_eval_robust.wrap.names import parse

    variant = parse(task)
    return variant.base if variant is not None else task.split("_", 1)[0]


def _kind(run: Run, task: str) -> str:
    """``format``, ``text`` or ``clean`` (a run's docs of one task share their kind)."""
    return run.tasks[task].kind


def _cells(rep: Replicates, confidence: float) -> dict[str, Cell]:
    low, high, _ = bca_interval(rep.estimate, rep.boot, rep.jack, confidence)
    out = {}
    for i, name in enumerate(rep.names):
        col = rep.boot[:, i]
        finite = col[np.isfinite(col)]
        degenerate = finite.size == 0 or float(finite.max()) == float(finite.min())
        lo, hi = (math.nan, math.nan) if degenerate else (float(low[i]), float(high[i]))
        out[name] = Cell(float(rep.estimate[i]), lo, hi)
    return out


def _mean_replicates(reps: Sequence[Replicates]) -> tuple[Replicates, np.ndarray]:
    """The mean over tasks: estimates, resamples and jackknife (NaN tasks left out per measure)."""
    est = np.stack([r.estimate for r in reps])  # [T, S]
    ok = np.isfinite(est)
    n_ok = ok.sum(axis=0)
    total = np.where(ok, est, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_ok > 0, total / np.maximum(n_ok, 1), np.nan)
        boot = np.stack([np.where(ok[t], r.boot, 0.0) for t, r in enumerate(reps)]).sum(axis=0)
        boot = np.where(n_ok > 0, boot / np.maximum(n_ok, 1), np.nan)
        # a resample where a task's measure is undefined (its value NaN) is undefined for the mean
        bad = np.zeros_like(boot, dtype=bool)
        for t, r in enumerate(reps):
            bad |= ok[t] & ~np.isfinite(r.boot)
        boot = np.where(bad, np.nan, boot)
        jack_rows = []
        for t, r in enumerate(reps):
            others = total - np.where(ok[t], est[t], 0.0)
            jack_rows.append(np.where(ok[t], (others + r.jack) / np.maximum(n_ok, 1), mean))
        jack = np.concatenate(jack_rows)
    return Replicates(reps[0].names, mean, boot, jack), n_ok


def build_leaderboard(
    runs: Sequence[Run], n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> Leaderboard:
    """The leaderboard of ``runs`` (one model each; two runs of one model are refused)."""
    models = [r.label for r in runs]
    dup = sorted({m for m in models if models.count(m) > 1})
    if dup:
        raise LeaderboardError(
            f"two runs are labelled {dup[0]!r}; give each model one run folder, or name them "
            "with --labels"
        )
    rows: list[LeaderboardRow] = []
    designs: dict[str, str] = {}
    notes: list[str] = []
    kinds_seen: list[str] = []
    per_model: dict[tuple[str, str], list[tuple[str, Replicates, RobustTable]]] = {}
    for run in runs:
        notes += [f"{run.label}: {n}" for n in run.notes]
        by_kind: dict[str, list[tuple[str, Replicates, RobustTable]]] = {}
        for i, task in enumerate(sorted(run.tasks)):
            tr = run.tasks[task]
            kind = _kind(run, task)
            if kind == "clean":
                notes.append(f"{run.label}: {task} has no perturbed prompts; left out")
                continue
            meta = (tr.config.get("metadata") or {}) if isinstance(tr.config, Mapping) else {}
            designs[task] = str(meta.get("design", "nested"))
            items = tr.item_list()
            table = table_of(items)  # variant_bac below reads the same table
            rep = replicates(table, n_resamples, seed=seed + i)
            by_kind.setdefault(kind, []).append((task, rep, table))
            rows.append(
                LeaderboardRow(
                    model=run.label,
                    kind=kind,
                    task=task,
                    n_examples=table.n_examples,
                    n_prompts=len(items),
                    n_tasks=1,
                    cells=_cells(rep, confidence),
                    variants=variant_bac(items),
                )
            )
        for kind, entries in by_kind.items():
            if kind not in kinds_seen:
                kinds_seen.append(kind)
            per_model[(run.label, kind)] = entries
    notes += _setting_notes(runs)
    # the mean of a kind is over the tasks every model ran, so the rows compare like with like
    for kind in kinds_seen:
        sets = {m: {_base_task(t) for t, _, _ in e} for (m, k), e in per_model.items() if k == kind}
        common = set.intersection(*sets.values())
        for m, s in sets.items():
            if s - common:
                notes.append(
                    f"{m}, {kind}: the mean leaves out {', '.join(sorted(s - common))}, which "
                    "not every model ran"
                )
        for (model, k), entries in per_model.items():
            if k != kind:
                continue
            kept = [e for e in entries if _base_task(e[0]) in common]
            if not kept:
                continue
            mean_rep, n_ok = _mean_replicates([rep for _, rep, _ in kept])
            rows.append(
                LeaderboardRow(
                    model=model,
                    kind=kind,
                    task=MEAN,
                    n_examples=sum(t.n_examples for _, _, t in kept),
                    n_prompts=sum(int(t.pert_count.sum() + t.has_clean.sum()) for _, _, t in kept),
                    n_tasks=len(kept),
                    cells=_cells(mean_rep, confidence),
                )
            )
            short = [n for n, c in zip(BOOTSTRAP_STATS, n_ok, strict=True) if c < len(kept)]
            shown = [n for n in short if n in COLUMNS]
            if shown:
                notes.append(
                    f"{model}, {kind}: the mean of {', '.join(shown)} leaves out tasks where "
                    "it is undefined"
                )
    if not rows:
        raise LeaderboardError("no perturbed task in the runs; run a *_pert or *_lb task first")
    return Leaderboard(
        rows=tuple(rows),
        models=tuple(models),
        kinds=tuple(kinds_seen),
        n_resamples=n_resamples,
        confidence=confidence,
        designs=designs,
        notes=tuple(notes),
    )


def _setting_notes(runs: Sequence[Run]) -> list[str]:
    """Notes on protocol settings (examples, perturbations, design, ...) that differ by model."""
    seen: dict[str, dict[str, set[str]]] = {}
    for run in runs:
        for tr in run.tasks.values():
            proto = protocol_settings(tr.config if isinstance(tr.config, Mapping) else {})
            for key in PROTOCOL_KEYS:
                seen.setdefault(key, {}).setdefault(run.label, set()).add(proto.get(key, ""))
    out = []
    for key, by_model in seen.items():
        if len({v for vals in by_model.values() for v in vals}) > 1:
            desc = "; ".join(f"{m}: {', '.join(sorted(v))}" for m, v in by_model.items())
            out.append(f"the runs differ in {key} ({desc}): compare their rows with care")
    return out


def _pct(c: Cell, signed: bool = False) -> str:
    if not math.isfinite(c.value):
        return "–"
    v = f"{100 * c.value:+.1f}" if signed else f"{100 * c.value:.1f}"
    if math.isfinite(c.low) and math.isfinite(c.high):
        return f"{v} [{100 * c.low:.1f}, {100 * c.high:.1f}]"
    return v


def _rank(r: LeaderboardRow) -> float:
    """Sort key: higher perturbed BAC first; undefined last."""
    v = r.cells["bac_pert"].value
    return -v if math.isfinite(v) else math.inf


def _row_cells(r: LeaderboardRow) -> list[str]:
    return [_pct(r.cells[k], signed=k == "delta_drop") for k in COLUMNS]


def to_markdown(lb: Leaderboard) -> str:
    level = round(100 * lb.confidence)
    design = sorted(set(lb.designs.values()))
    parts = [
        "# Robustness leaderboard",
        "",
        f"One row per model: the mean over the tasks of each perturbation kind, in %, with "
        f"{level} % clustered BCa intervals ({lb.n_resamples} resamples; examples resampled with "
        f"all their variants, tasks independently). Design: {', '.join(design)}. "
        "Variant = prompt format (format perturbations) or text-perturbation kind (text).",
    ]
    for kind in lb.kinds:
        rows = [r for m in lb.models if (r := lb.row(m, kind)) is not None]
        rows.sort(key=_rank)
        parts += ["", f"## {kind} perturbations: mean over tasks", ""]
        header = ["model", "tasks", "examples", *COLUMNS.values()]
        parts.append(
            markdown_table(
                header, [[r.model, str(r.n_tasks), str(r.n_examples), *_row_cells(r)] for r in rows]
            )
        )
    parts += ["", "## Per task", ""]
    header = ["kind", "task", "model", "examples", "prompts", *COLUMNS.values()]
    body = []
    for kind in lb.kinds:
        tasks = sorted({r.task for r in lb.rows if r.kind == kind and r.task != MEAN})
        for task in tasks:
            for m in lb.models:
                r = lb.row(m, kind, task)
                if r is not None:
                    body.append(
                        [kind, task, m, str(r.n_examples), str(r.n_prompts), *_row_cells(r)]
                    )
    parts.append(markdown_table(header, body))
    if lb.notes:
        parts += ["", "Notes:", ""] + [f"- {n}" for n in lb.notes]
    return "\n".join(parts) + "\n"


def _flat(r: LeaderboardRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": r.model,
        "kind": r.kind,
        "task": r.task,
        "n_tasks": r.n_tasks,
        "n_examples": r.n_examples,
        "n_prompts": r.n_prompts,
    }
    for name in BOOTSTRAP_STATS:
        c = r.cells[name]
        for suffix, x in (("", c.value), ("_low", c.low), ("_high", c.high)):
            out[name + suffix] = x if math.isfinite(x) else None
    return out


def to_csv(lb: Leaderboard) -> str:
    rows = [_flat(r) for r in lb.rows]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return buf.getvalue()


def to_json(lb: Leaderboard) -> str:
    doc = {
        "confidence": lb.confidence,
        "n_resamples": lb.n_resamples,
        "models": list(lb.models),
        "kinds": list(lb.kinds),
        "designs": dict(sorted(lb.designs.items())),
        "rows": [
            {
                **{k: v for k, v in _flat(r).items() if k in ("model", "kind", "task")},
                "n_tasks": r.n_tasks,
                "n_examples": r.n_examples,
                "n_prompts": r.n_prompts,
                "metrics": {n: r.cells[n].as_dict() for n in BOOTSTRAP_STATS},
                "variant_bac": dict(sorted(r.variants.items())),
            }
            for r in lb.rows
        ],
        "notes": list(lb.notes),
    }
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"
