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

Beside the measures, every row carries what a reader needs to take them at their word:

* the spread, best and worst variant against their permutation null
  (:mod:`lm_eval_robust.metrics.spread_null`: variant labels permuted within examples, the same
  size), with a p-value; a spread whose p-value is 0.05 or more is marked as within noise;
* the certified share from the finite-sample certificate
  (:mod:`lm_eval_robust.metrics.exact_cert`), n/a with the K it needs below that K, and the
  paper's plug-in p_C labelled with its K, both averaged over repeated estimation/held-back
  splits with their held-back check (:mod:`lm_eval_robust.metrics.cert_splits`);
* and, over the models, paired differences on shared examples with Holm's rule and rank
  intervals (:mod:`lm_eval_robust.report.compare`).
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
from lm_eval_robust.metrics.cert_splits import RuleSummary, SplitFlags, split_flags, summarize
from lm_eval_robust.metrics.margins import MarginTable
from lm_eval_robust.metrics.robustness import (
    BOOTSTRAP_STATS,
    Replicates,
    RobustTable,
    replicates,
    table_of,
    variant_bac,
)
from lm_eval_robust.metrics.spread_null import SpreadNull, mean_null, spread_null
from lm_eval_robust.report.compare import MEASURES, Comparison, compare_models
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
    spread: SpreadNull | None = None  # permutation null of best/worst/median/spread
    certs: Mapping[str, RuleSummary] = field(default_factory=dict)  # rule -> rate and check


@dataclass(frozen=True)
class Leaderboard:
    rows: tuple[LeaderboardRow, ...]
    models: tuple[str, ...]
    kinds: tuple[str, ...]
    n_resamples: int
    confidence: float
    designs: Mapping[str, str]  # task -> design
    notes: tuple[str, ...] = ()
    comparison: Comparison | None = None
    phi: float = 0.1
    alpha: float = 0.05
    n_splits: int = 50
    n_permutations: int = 2000

    def row(self, model: str, kind: str, task: str = MEAN) -> LeaderboardRow | None:
        for r in self.rows:
            if (r.model, r.kind, r.task) == (model, kind, task):
                return r
        return None


def _base_task(task: str) -> str:
    """``ni065_format_lb`` / ``ni065_format_pert`` -> ``ni065``; a wrapped stock task
    (``<task>_robust_text``) -> ``<task>``. A split other than the test split keeps its name
    (``ni065_holdout``, ``<task>_holdout``): its examples are other ones, not the same task."""
    from lm_eval_robust.wrap.names import parse

    variant = parse(task)
    if variant is not None:
        if variant.split in ("holdout", "train"):
            return f"{variant.base}_{variant.split}"
        return variant.base
    for split in ("_holdout", "_train"):
        if task.endswith(split):
            return task.split("_", 1)[0] + split
    return task.split("_", 1)[0]


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
    runs: Sequence[Run],
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    n_splits: int = 50,
    n_permutations: int = 2000,
    phi: float = 0.1,
    alpha: float = 0.05,
) -> Leaderboard:
    """The leaderboard of ``runs`` (one model each; two runs of one model are refused).

    ``n_splits`` estimation/held-back splits for the certificate rates, ``n_permutations``
    draws of the spread's null, certificates at failure ratio ``phi`` and level ``alpha``."""
    models = [r.label for r in runs]
    dup = sorted({m for m in models if models.count(m) > 1})
    if dup:
        raise LeaderboardError(
            f"two runs are labelled {dup[0]!r}; give each model one run folder, or name them "
            "with --labels"
        )
    rows: list[LeaderboardRow] = []
    designs_seen: dict[str, set[str]] = {}
    notes: list[str] = []
    kinds_seen: list[str] = []
    per_model: dict[tuple[str, str], list[tuple[str, Replicates, RobustTable]]] = {}
    extras: dict[tuple[str, str], tuple[SpreadNull, dict[str, SplitFlags]]] = {}
    n_boot = min(n_resamples, 2000)
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
            designs_seen.setdefault(task, set()).add(str(meta.get("design", "nested")))
            items = tr.item_list()
            table = table_of(items)  # variant_bac below reads the same table
            rep = replicates(table, n_resamples, seed=seed + i)
            by_kind.setdefault(kind, []).append((task, rep, table))
            null = spread_null(items, n_permutations, seed=seed + i)
            scored = [it for it in items if it.get("ll") is not None]
            flags = (
                split_flags(MarginTable.from_items(scored), n_splits, phi, alpha) if scored else {}
            )
            extras[(run.label, task)] = (null, flags)
            certs = {r: summarize([f], phi, n_boot, confidence, seed + i) for r, f in flags.items()}
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
                    spread=null,
                    certs=certs,
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
            ext = [extras[(model, t)] for t, _, _ in kept]
            rules = sorted(set.intersection(*(set(f) for _, f in ext)))
            mean_certs = {
                r: summarize([f[r] for _, f in ext], phi, n_boot, confidence, seed) for r in rules
            }
            rows.append(
                LeaderboardRow(
                    model=model,
                    kind=kind,
                    task=MEAN,
                    n_examples=sum(t.n_examples for _, _, t in kept),
                    n_prompts=sum(int(t.pert_count.sum() + t.has_clean.sum()) for _, _, t in kept),
                    n_tasks=len(kept),
                    cells=_cells(mean_rep, confidence),
                    spread=mean_null([n for n, _ in ext]),
                    certs=mean_certs,
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
    # every design a task was run with, whatever the order of the runs
    designs = {t: "+".join(sorted(d)) for t, d in designs_seen.items()}
    comparison = None
    if len(models) > 1:
        common_tables: dict[tuple[str, str], dict[str, RobustTable]] = {}
        for kind in kinds_seen:
            by_model = {m: ents for (m, k), ents in per_model.items() if k == kind}
            common = set.intersection(
                *({_base_task(t) for t, _, _ in ents} for ents in by_model.values())
            )
            for m, ents in by_model.items():
                common_tables[(m, kind)] = {
                    _base_task(t): tab for t, _, tab in ents if _base_task(t) in common
                }
        comparison = compare_models(common_tables, models, n_boot, confidence, seed)
    return Leaderboard(
        rows=tuple(rows),
        models=tuple(models),
        kinds=tuple(kinds_seen),
        n_resamples=n_resamples,
        confidence=confidence,
        designs=designs,
        notes=tuple(notes),
        comparison=comparison,
        phi=phi,
        alpha=alpha,
        n_splits=n_splits,
        n_permutations=n_permutations,
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


#: columns after :data:`COLUMNS`: the spread's null and the certificates
EXTRA_COLUMNS: tuple[str, ...] = (
    "spread with no variant effect (p)",
    "certified (exact)",
    "plug-in p_C (not a guarantee)",
)
NOISE_MARK = "≈"


def _p(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    return f"{x:.3f}" if x < 0.01 else f"{x:.2f}"


def _noise_cell(r: LeaderboardRow) -> str:
    if r.spread is None or not math.isfinite(r.spread.p_value()):
        return "–"
    return f"{100 * r.spread.null_mean():.1f} (p {_p(r.spread.p_value())})"


def within_noise(r: LeaderboardRow, level: float = 0.05) -> bool:
    """The row's spread is no larger than variant labels permuted within examples give."""
    if r.spread is None:
        return False
    p = r.spread.p_value()
    return math.isfinite(p) and p >= level


def _rate(c: RuleSummary | None, with_k: bool = False) -> str:
    if c is None:
        return "–"
    if not c.available:
        return (
            f"n/a (K ≥ {c.reason.split('K >= ')[1].split(' ')[0]})"
            if "K >= " in c.reason
            else "n/a"
        )
    v = f"{100 * c.rate:.1f}"
    if math.isfinite(c.rate_low) and math.isfinite(c.rate_high) and c.rate_high > c.rate_low:
        v += f" [{100 * c.rate_low:.1f}, {100 * c.rate_high:.1f}]"
    return v + (f" (K = {c.k})" if with_k else "")


def _row_cells(r: LeaderboardRow) -> list[str]:
    cells = [_pct(r.cells[k], signed=k == "delta_drop") for k in COLUMNS]
    if within_noise(r):
        cells[list(COLUMNS).index("fmt_spread")] += f" {NOISE_MARK}"
    return [
        *cells,
        _noise_cell(r),
        _rate(r.certs.get("exact")),
        _rate(r.certs.get("plugin_c"), with_k=True),
    ]


def _noise_section(lb: Leaderboard) -> list[str]:
    """Best, worst and spread of each mean row beside what permuted variant labels give."""
    body = []
    for kind in lb.kinds:
        for m in lb.models:
            r = lb.row(m, kind)
            if r is None or r.spread is None:
                continue
            cells = [kind, m]
            for name in ("fmt_best", "fmt_worst", "fmt_spread"):
                obs = r.cells[name].value
                null = r.spread.null_mean(name)
                cells.append(
                    f"{100 * obs:.1f} vs {100 * null:.1f} (p {_p(r.spread.p_value(name))})"
                    if math.isfinite(obs) and math.isfinite(null)
                    else "–"
                )
            cells.append("within noise" if within_noise(r) else "above noise")
            body.append(cells)
    if not body:
        return []
    return [
        "",
        "## Best, worst and spread against noise: mean over tasks",
        "",
        f"Observed vs the mean of {lb.n_permutations} draws with the variant labels permuted "
        "within each example (no variant effect, same examples); one-sided p (best and spread: "
        "as large or larger; worst: as small or smaller).",
        "",
        markdown_table(
            ["kind", "model", "best variant", "worst variant", "spread", "spread is"], body
        ),
    ]


def _cert_section(lb: Leaderboard) -> list[str]:
    header = [
        "kind", "model", "rule", "certified", "single-split range", "held-back acc. certified",
        "uncertified", "certified − uncertified", "certified below 1−φ", "verdict",
    ]  # fmt: skip
    body = []
    for kind in lb.kinds:
        for m in lb.models:
            r = lb.row(m, kind)
            if r is None:
                continue
            for rule in ("exact", "plugin_c", "plugin_h"):
                c = r.certs.get(rule)
                if c is None:
                    continue
                if not c.available:
                    body.append([kind, m, c.label, c.reason, "", "", "", "", "", "n/a"])
                    continue
                diff = f"{100 * c.diff:+.1f}" if math.isfinite(c.diff) else "–"
                if math.isfinite(c.diff_low):
                    diff += f" [{100 * c.diff_low:+.1f}, {100 * c.diff_high:+.1f}]"
                verdict = c.verdict
                body.append(
                    [
                        kind,
                        m,
                        c.label,
                        _rate(c),
                        f"{100 * c.split_min:.1f}–{100 * c.split_max:.1f}",
                        "–"
                        if not math.isfinite(c.acc_certified)
                        else f"{100 * c.acc_certified:.1f}",
                        "–"
                        if not math.isfinite(c.acc_uncertified)
                        else f"{100 * c.acc_uncertified:.1f}",
                        diff,
                        "–"
                        if not math.isfinite(c.share_below)
                        else f"{100 * c.share_below:.1f} (≤ {100 * c.share_below_bound:.1f})",
                        verdict,
                    ]
                )
    return [
        "",
        "## Certificates: mean over tasks, checked on held-back variants",
        "",
        f"φ = {lb.phi}; rates averaged over {lb.n_splits} random estimation/held-back splits of "
        "each example's variants, the interval redrawing examples and the split. *exact*: the "
        "finite-sample certificate (exact binomial bound on the example's accuracy under "
        f"perturbation, Benjamini–Hochberg at {lb.alpha}; n/a below the K it needs). *plug-in*: "
        "the paper's estimator (box = sample range of the estimation shifts, ε_B = 0) at this "
        "run's K, an estimate with no finite-sample guarantee. The check pools the held-back "
        "variants over the splits; *selects*: certified minus uncertified held-back accuracy "
        "has an interval above 0; *fails its promise*: the certified examples' held-back "
        "accuracy has an interval below 1 − φ; *promise in doubt*: its point estimate is below "
        "1 − φ, or more certified examples fall below 1 − φ on their held-back variants than "
        "certificates all exactly at 1 − φ would (the bound in brackets).",
        "",
        markdown_table(header, body),
    ]


def _comparison_section(lb: Leaderboard) -> list[str]:
    comp = lb.comparison
    if comp is None or not comp.pairs:
        return []
    level = round(100 * lb.confidence)
    parts = [
        "",
        "## Model comparisons: paired differences on shared examples",
        "",
        f"A − B, mean over the tasks both ran, on the examples both scored; {level} % clustered "
        f"BCa intervals ({comp.n_resamples} resamples, the same examples drawn for both models); "
        f"p two-sided from the bootstrap, Holm-adjusted over the model pairs of each kind and "
        f"measure. *distinguishable*: Holm-adjusted p < {comp.level:.2f}. Rank intervals: "
        "[1 + models distinguishably better, M − models distinguishably worse].",
        "",
    ]
    header = ["kind", "measure", "A", "B", "examples", "A − B", "p", "p (Holm)", "verdict"]
    body = []
    for p in comp.pairs:
        d = f"{100 * p.diff:+.1f}"
        if math.isfinite(p.low):
            d += f" [{100 * p.low:+.1f}, {100 * p.high:+.1f}]"
        body.append(
            [
                p.kind,
                MEASURES[p.measure],
                p.model_a,
                p.model_b,
                str(p.n_examples),
                d,
                _p(p.p),
                _p(p.p_holm),
                "distinguishable" if p.distinguishable else "not distinguishable",
            ]
        )
    parts.append(markdown_table(header, body))
    parts += ["", "Rank intervals (1 = most robust):", ""]
    header = ["kind", "model", *(MEASURES[m] for m in MEASURES)]
    body = []
    for kind in lb.kinds:
        for m in lb.models:
            cells = []
            for meas in MEASURES:
                hit = [r for r in comp.ranks if (r.kind, r.model, r.measure) == (kind, m, meas)]
                if not hit:
                    cells.append("–")
                    continue
                r = hit[0]
                rng = str(r.low) if r.low == r.high else f"{r.low}–{r.high}"
                cells.append(f"{r.rank} [{rng}]")
            body.append([kind, m, *cells])
    parts.append(markdown_table(header, body))
    return parts


def to_markdown(lb: Leaderboard) -> str:
    level = round(100 * lb.confidence)
    design = sorted({d for v in lb.designs.values() for d in v.split("+")})
    parts = [
        "# Robustness leaderboard",
        "",
        f"One row per model: the mean over the tasks of each perturbation kind, in %, with "
        f"{level} % clustered BCa intervals ({lb.n_resamples} resamples; examples resampled with "
        f"all their variants, tasks independently). Design: {', '.join(design)}. "
        "Variant = prompt format (format perturbations) or text-perturbation kind (text). "
        f"{NOISE_MARK}: the spread is within noise, i.e. variant labels permuted within examples "
        f"({lb.n_permutations} draws) give a spread as large with p ≥ 0.05; the column beside it "
        "is that null's mean spread. The certified share is the finite-sample certificate "
        "(n/a below the K it needs); the paper's plug-in estimate is labelled with its K.",
    ]
    for kind in lb.kinds:
        rows = [r for m in lb.models if (r := lb.row(m, kind)) is not None]
        rows.sort(key=_rank)
        parts += ["", f"## {kind} perturbations: mean over tasks", ""]
        header = ["model", "tasks", "examples", *COLUMNS.values(), *EXTRA_COLUMNS]
        parts.append(
            markdown_table(
                header, [[r.model, str(r.n_tasks), str(r.n_examples), *_row_cells(r)] for r in rows]
            )
        )
    parts += ["", "## Per task", ""]
    header = ["kind", "task", "model", "examples", "prompts", *COLUMNS.values(), *EXTRA_COLUMNS]
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
    parts += _noise_section(lb)
    parts += _cert_section(lb)
    parts += _comparison_section(lb)
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
    if r.spread is not None:
        out |= r.spread.as_dict()
    for rule, rs in sorted(r.certs.items()):
        out[f"cert_{rule}"] = _clean(rs.rate) if rs.available else None
        out[f"cert_{rule}_low"] = _clean(rs.rate_low) if rs.available else None
        out[f"cert_{rule}_high"] = _clean(rs.rate_high) if rs.available else None
        out[f"cert_{rule}_k"] = rs.k
        out[f"cert_{rule}_na"] = rs.reason
    return out


def to_csv(lb: Leaderboard) -> str:
    rows = [_flat(r) for r in lb.rows]
    fields = list(dict.fromkeys(k for r in rows for k in r))  # rows may lack a rule's columns
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return buf.getvalue()


def _clean(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _comparison_json(comp: Comparison | None) -> dict[str, Any] | None:
    if comp is None:
        return None
    return {
        "level": comp.level,
        "n_resamples": comp.n_resamples,
        "pairs": [
            {k: (_clean(v) if isinstance(v, float) else v) for k, v in p.__dict__.items()}
            for p in comp.pairs
        ],
        "ranks": [
            {k: (_clean(v) if isinstance(v, float) else v) for k, v in r.__dict__.items()}
            for r in comp.ranks
        ],
    }


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
                "spread_null": r.spread.as_dict() if r.spread is not None else None,
                "certificates": {k: c.as_dict() for k, c in sorted(r.certs.items())},
            }
            for r in lb.rows
        ],
        "certificate_settings": {
            "phi": lb.phi,
            "alpha": lb.alpha,
            "n_splits": lb.n_splits,
        },
        "n_permutations": lb.n_permutations,
        "comparison": _comparison_json(lb.comparison),
        "notes": list(lb.notes),
    }
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"
