"""One row per model: the leaderboard table over runs of several models.

Each run (an ``lm_eval --output_path OUT --log_samples`` folder) is one model. For every task of a
run, and for the mean over the tasks of each perturbation kind, the table gives the measures of
:mod:`lm_eval_robust.stats.robustness` with clustered BCa intervals (examples resampled with all
their variants, ``n_resamples`` times):

* per task: the task's own bootstrap;
* the mean over tasks: every task is resampled independently (a stratified bootstrap), so the
  mean's resamples are the means of the tasks' resamples, and its jackknife leaves out one example
  of one task at a time. Tasks where a measure is undefined are left out of that measure's mean,
  and the row says how many tasks it averages. The mean is over the tasks every model ran (a
  model that cannot score a task, e.g. labels that are not single tokens for its tokenizer, takes
  that task out of every model's mean, with a note), so the rows compare like with like.

Rows are keyed by (model, kind, task); ``task == "mean"`` is the average. Values are fractions in
the JSON and CSV, percentages in the Markdown (:mod:`lm_eval_robust.report.leaderboard_tables`
renders the three; :mod:`~lm_eval_robust.report.leaderboard_html` the page).

Beside the measures, every row carries what a reader needs to take them at their word:

* the spread, best and worst variant against their permutation null
  (:mod:`lm_eval_robust.stats.spread_null`: variant labels permuted within examples, the same
  size), with a p-value; a spread whose p-value is 0.05 or more is marked as within noise;
* the certified share from the finite-sample certificate
  (:mod:`lm_eval_robust.stats.exact_cert`), n/a with the K it needs below that K, and the
  paper's plug-in p_C labelled with its K, both averaged over repeated estimation/held-back
  splits with their held-back check (:mod:`lm_eval_robust.stats.cert_splits`);
* and, over the models, paired differences on shared examples with Holm's rule and rank
  intervals (:mod:`lm_eval_robust.report.compare`).

A wrapped stock lm-eval task (``<task>_robust_format`` / ``_robust_text``) also carries its own
per-doc metric (``acc`` for BIG-bench, MMLU, ARC; ``exact_match`` for GSM8K): its rows get that
metric's clean and perturbed score, drop and worst case (:data:`STOCK_COLUMNS`), from the logged
per-prompt values with the same clustered BCa intervals, and the mean rows average them over the
tasks of the same metric only (:attr:`LeaderboardRow.stock`, keyed by the metric's label).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lm_eval_robust.base.defaults import DEFAULT_CERT_PHI, DEFAULT_RESAMPLES
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.report.compare import Comparison, compare_models
from lm_eval_robust.stats.bootstrap import bca_interval, jackknife_weights, resample_weights
from lm_eval_robust.stats.cert_splits import RULES, RuleSummary, SplitFlags, split_flags, summarize
from lm_eval_robust.stats.margins import MarginTable, chance_share, label_counts
from lm_eval_robust.stats.robustness import (
    BOOTSTRAP_STATS,
    Replicates,
    RobustTable,
    replicates,
    table_of,
    variant_bac,
)
from lm_eval_robust.stats.spread_null import SpreadNull, mean_null, spread_null
from lm_eval_robust.stats.wrap_metrics import STOCK_STATS, StockTable
from lm_eval_robust.tasks.perturb.text import TEXT_PERTURBATIONS
from lm_eval_robust.values.pairing import PROTOCOL_KEYS, Run, StockValues, protocol_settings

__all__ = [
    "COLUMNS",
    "STOCK_COLUMNS",
    "STOCK_MEASURES",
    "Cell",
    "Leaderboard",
    "LeaderboardRow",
    "StockCells",
    "build_leaderboard",
    "within_noise",
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


#: the statistics of a stock task's own metric the tables show, with their header after the
#: metric's name (``acc clean``); the CSV and JSON carry every one of :data:`STOCK_STATS`
STOCK_COLUMNS: dict[str, str] = {
    "clean": "clean",
    "pert": "perturbed",
    "drop": "drop",
    "worst": "worst-case",
}


#: the stock metric's statistics the paired model comparison tests (higher is more robust)
STOCK_MEASURES: dict[str, str] = {"drop": "drop", "worst": "worst-case"}


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
class StockCells:
    """A stock task's own metric in one row: the first metric lm-eval lists for the task
    (``listed``: all it reports), its statistics (:data:`STOCK_STATS`) and, in a mean row, the
    number of tasks of that metric it averages."""

    metric: str
    filter: str
    listed: tuple[str, ...]
    n_tasks: int
    cells: Mapping[str, Cell]

    @property
    def label(self) -> str:
        return self.metric if self.filter == "none" else f"{self.metric} ({self.filter})"


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
    stock: Mapping[str, StockCells] = field(default_factory=dict)  # metric label -> its cells
    #: a uniform random pick's score (mean of 1/labels over clean prompts; over tasks in a mean
    #: row): the chance line of the figures, not written to the tables
    chance: float = math.nan


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
    #: per stock metric label, the paired model comparison of :data:`STOCK_MEASURES`
    stock_comparison: Mapping[str, Comparison] = field(default_factory=dict)

    def row(self, model: str, kind: str, task: str = MEAN) -> LeaderboardRow | None:
        for r in self.rows:
            if (r.model, r.kind, r.task) == (model, kind, task):
                return r
        return None

    def stock_labels(self, kind: str | None = None) -> tuple[str, ...]:
        """The stock metrics' labels of the rows (of one kind), in order of first appearance."""
        seen = dict.fromkeys(
            label for r in self.rows if kind is None or r.kind == kind for label in r.stock
        )
        return tuple(seen)

    def stock_listed(self) -> dict[str, tuple[str, ...]]:
        """Per task reporting several stock metrics, all of them in lm-eval's order (the
        tables show the first)."""
        out: dict[str, tuple[str, ...]] = {}
        for r in self.rows:
            if r.task == MEAN:
                continue
            for sc in r.stock.values():
                if len(sc.listed) > 1:
                    out[r.task] = sc.listed
        return dict(sorted(out.items()))

    def mean_certificates(self) -> Iterator[tuple[str, str, RuleSummary]]:
        """``(kind, model, summary)`` of every certificate rule of the mean rows, in the order
        the tables show them (kinds, then models, then :data:`RULES`)."""
        for kind in self.kinds:
            for model in self.models:
                r = self.row(model, kind)
                if r is None:
                    continue
                for rule in RULES:
                    c = r.certs.get(rule)
                    if c is not None:
                        yield kind, model, c


def format_share(items: Sequence[Mapping[str, Any]]) -> float:
    """The share of a format task's perturbed prompts that are format changes: a wrapped prompt
    whose parts cannot be found gets a text perturbation instead, its variant named by the text
    kind (``zero_width``, ...). NaN when the task has no perturbed prompt."""
    pert = [str(it.get("variant", "")) for it in items if int(it.get("pert_id", 0)) > 0]
    if not pert:
        return math.nan
    return sum(v not in TEXT_PERTURBATIONS for v in pert) / len(pert)


def _mean_chance(rows: Sequence[LeaderboardRow], model: str, kind: str, tasks: list[str]) -> float:
    """The mean over ``tasks`` of the model's per-task chance levels (a mean row's chance)."""
    vals = [r.chance for r in rows if (r.model, r.kind) == (model, kind) and r.task in tasks]
    return float(np.mean(vals)) if vals and all(math.isfinite(v) for v in vals) else math.nan


def _base_task(task: str) -> str:
    """``ni065_format_lb`` / ``ni065_format_pert`` -> ``ni065``; a wrapped stock task
    (``<task>_robust_text``) -> ``<task>``. A split other than the test split keeps its name
    (``ni065_holdout``, ``<task>_holdout``): its examples are other ones, not the same task."""
    from lm_eval_robust.tasks.wrap.names import parse

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


#: the columns a permutation null tests: n/a where it cannot (one perturbed prompt per example)
SPREAD_CELLS = ("fmt_best", "fmt_median", "fmt_worst", "fmt_spread")


def _no_spread(cells: Mapping[str, Cell]) -> dict[str, Cell]:
    nan = Cell(math.nan, math.nan, math.nan)
    return {k: (nan if k in SPREAD_CELLS else c) for k, c in cells.items()}


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


def _no_cells() -> dict[str, Cell]:
    """The BAC measures of a task without label scores: undefined."""
    return {name: Cell(math.nan, math.nan, math.nan) for name in BOOTSTRAP_STATS}


def _stock_replicates(t: StockTable, n_resamples: int, seed: int) -> Replicates:
    """Clustered bootstrap and jackknife of a stock metric's statistics (:data:`STOCK_STATS`),
    examples resampled with all their prompts, as :func:`replicates` does for BAC."""
    e = t.n_examples
    est = t.statistics(np.ones((1, e)))[0]
    if e < 2:
        nan = np.full((0, len(STOCK_STATS)), np.nan)
        return Replicates(STOCK_STATS, est, nan, nan)
    rng = np.random.default_rng(seed)
    boot = np.concatenate(
        [t.statistics(w) for w in resample_weights(e, n_resamples, rng, max_elements=1 << 18)]
    )
    jack = np.concatenate([t.statistics(w) for w in jackknife_weights(e, max_elements=1 << 18)])
    return Replicates(STOCK_STATS, est, boot, jack)


def stock_table(sv: StockValues) -> StockTable:
    """The per-example sums of a task's stock metric."""
    return StockTable.from_items(sv.item_list(), sv.higher_is_better)


def _task_stock(
    sv: StockValues, n_resamples: int, seed: int, confidence: float
) -> tuple[StockCells, tuple[StockValues, Replicates, StockTable]]:
    """One task's stock metric: its row cells, and what the mean rows and the comparison read
    (the values, their replicates, the per-example table)."""
    st = stock_table(sv)
    srep = _stock_replicates(st, n_resamples, seed)
    cells = StockCells(sv.metric, sv.filter, sv.listed, 1, _cells(srep, confidence))
    return cells, (sv, srep, st)


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
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    n_splits: int = 50,
    n_permutations: int = 2000,
    phi: float = DEFAULT_CERT_PHI,
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
    stock_reps: dict[tuple[str, str], tuple[StockValues, Replicates, StockTable]] = {}
    #: (model, kind) -> the tasks with a stock metric (wrapped multiple-choice and stock-only)
    stock_tasks: dict[tuple[str, str], list[str]] = {}
    #: (model, kind) -> wrapped tasks with the stock metric only (generate_until)
    only_stock: dict[tuple[str, str], list[str]] = {}
    n_boot = min(n_resamples, 2000)
    one_variant: set[str] = set()  # runs noted for spreads n/a at K = 1
    for run in runs:
        notes += [f"{run.label}: {n}" for n in run.notes]
        by_kind: dict[str, list[tuple[str, Replicates, RobustTable]]] = {}
        for i, task in enumerate(sorted(run.tasks)):
            tr = run.tasks[task]
            kind = _kind(run, task)
            if kind == "clean":
                notes.append(f"{run.label}: {task} has no perturbed prompts; left out")
                continue
            designs_seen.setdefault(task, set()).add(tr.design)
            items = tr.item_list()
            table = table_of(items)  # variant_bac below reads the same table
            rep = replicates(table, n_resamples, seed=seed + i)
            in_mean = True
            if kind == "format":
                share = format_share(items)
                if share == 0.0:
                    in_mean = False
                    notes.append(
                        f"{run.label}: {task}: no prompt parts were found, so its perturbed "
                        "prompts are text perturbations; its row stands, left out of the format "
                        "means and comparisons"
                    )
                elif share < 1.0:
                    notes.append(
                        f"{run.label}: {task}: {100 * (1 - share):.0f} % of its perturbed prompts "
                        "are text perturbations (no prompt parts found in them)"
                    )
            if in_mean:
                by_kind.setdefault(kind, []).append((task, rep, table))
            null = spread_null(items, n_permutations, seed=seed + i)
            row_cells = _cells(rep, confidence)
            if not np.isfinite(null.observed).any():
                row_cells = _no_spread(row_cells)
                if run.label not in one_variant:
                    one_variant.add(run.label)
                    notes.append(
                        f"{run.label}: best, median and worst variant and spread are n/a: each "
                        "example has one perturbed prompt (K = 1), so no two variants are "
                        "compared on the same examples; they need K >= 2"
                    )
            scored = [it for it in items if it.get("ll") is not None]
            n_choices = label_counts(scored)
            if len(n_choices) > 1:  # a margin needs one label set: no certificate (a note says so)
                notes.append(
                    f"{run.label}: {task}: certificates n/a, its docs have different numbers "
                    f"of choices ({', '.join(map(str, n_choices))})"
                )
                scored = []
            flags = (
                split_flags(MarginTable.from_items(scored), n_splits, phi, alpha) if scored else {}
            )
            extras[(run.label, task)] = (null, flags)
            certs = {r: summarize([f], phi, n_boot, confidence, seed + i) for r, f in flags.items()}
            stock: dict[str, StockCells] = {}
            if tr.stock is not None:
                cells, stock_reps[(run.label, task)] = _task_stock(
                    tr.stock, n_resamples, seed + i, confidence
                )
                stock[tr.stock.label] = cells
                if in_mean:
                    stock_tasks.setdefault((run.label, kind), []).append(task)
            rows.append(
                LeaderboardRow(
                    model=run.label,
                    kind=kind,
                    task=task,
                    n_examples=table.n_examples,
                    n_prompts=len(items),
                    n_tasks=1,
                    cells=row_cells,
                    variants=variant_bac(items),
                    spread=null,
                    certs=certs,
                    stock=stock,
                    chance=chance_share(items),
                )
            )
        for kind, entries in by_kind.items():
            if kind not in kinds_seen:
                kinds_seen.append(kind)
            per_model[(run.label, kind)] = entries
        for j, task in enumerate(sorted(run.stock_only)):
            tr = run.stock_only[task]
            if tr.stock is None or tr.kind in ("", "clean"):
                notes.append(f"{run.label}: {task} has no perturbed prompts; left out")
                continue
            designs_seen.setdefault(task, set()).add(tr.design)
            cells, stock_reps[(run.label, task)] = _task_stock(
                tr.stock, n_resamples, seed + len(run.tasks) + j, confidence
            )
            st = stock_reps[(run.label, task)][2]
            stock_tasks.setdefault((run.label, tr.kind), []).append(task)
            only_stock.setdefault((run.label, tr.kind), []).append(task)
            if tr.kind not in kinds_seen:
                kinds_seen.append(tr.kind)
            rows.append(
                LeaderboardRow(
                    model=run.label,
                    kind=tr.kind,
                    task=task,
                    n_examples=st.n_examples,
                    n_prompts=len(tr.stock.items),
                    n_tasks=1,
                    cells=_no_cells(),
                    stock={tr.stock.label: cells},
                )
            )
    notes += _setting_notes(runs)
    # the mean of a kind is over the tasks every model ran, so the rows compare like with like
    for kind in kinds_seen:
        sets = {m: {_base_task(t) for t, _, _ in e} for (m, k), e in per_model.items() if k == kind}
        common = set.intersection(*sets.values()) if sets else set()
        for m, s in sets.items():
            if s - common:
                notes.append(
                    f"{m}, {kind}: the mean leaves out {', '.join(sorted(s - common))}, which "
                    "not every model ran"
                )
        # wrapped tasks with their own metric only: the same rule over the models that ran any
        only = {m: {_base_task(t) for t in ts} for (m, k), ts in only_stock.items() if k == kind}
        everyone = len(only) == len(models)
        only_common = set.intersection(*only.values()) if only and everyone else set()
        for m, s in only.items():
            if s - only_common:
                notes.append(
                    f"{m}, {kind}: the mean leaves out {', '.join(sorted(s - only_common))}, "
                    "which not every model ran"
                )
        for model in [m for m in models if (m, kind) in only_stock and (m, kind) not in per_model]:
            gen = [t for t in only_stock[(model, kind)] if _base_task(t) in only_common]
            if not gen:
                continue
            mean_stock, more = _mean_stock(model, kind, gen, stock_reps, confidence)
            notes += more
            rows.append(
                LeaderboardRow(
                    model=model,
                    kind=kind,
                    task=MEAN,
                    n_examples=sum(stock_reps[(model, t)][2].n_examples for t in gen),
                    n_prompts=sum(len(stock_reps[(model, t)][0].items) for t in gen),
                    n_tasks=len(gen),
                    cells=_no_cells(),
                    stock=mean_stock,
                )
            )
        for (model, k), entries in per_model.items():
            if k != kind:
                continue
            kept = [e for e in entries if _base_task(e[0]) in common]
            if not kept:
                continue
            gen = [t for t in only_stock.get((model, kind), []) if _base_task(t) in only_common]
            if gen:
                notes.append(
                    f"{model}, {kind}: the BAC columns average only the tasks scored by label "
                    f"({len(kept)} of {len(kept) + len(gen)}); {', '.join(gen)}: the task's own "
                    "metric only (no label scores)"
                )
            mean_rep, n_ok = _mean_replicates([rep for _, rep, _ in kept])
            ext = [extras[(model, t)] for t, _, _ in kept]
            rules = sorted(set.intersection(*(set(f) for _, f in ext)))
            mean_certs = {
                r: summarize([f[r] for _, f in ext], phi, n_boot, confidence, seed) for r in rules
            }
            mean_stock, more = _mean_stock(
                model, kind, [t for t, _, _ in kept] + gen, stock_reps, confidence
            )
            notes += more
            rows.append(
                LeaderboardRow(
                    model=model,
                    kind=kind,
                    task=MEAN,
                    n_examples=sum(t.n_examples for _, _, t in kept)
                    + sum(stock_reps[(model, t)][2].n_examples for t in gen),
                    n_prompts=sum(int(t.pert_count.sum() + t.has_clean.sum()) for _, _, t in kept)
                    + sum(len(stock_reps[(model, t)][0].items) for t in gen),
                    n_tasks=len(kept) + len(gen),
                    cells=_cells(mean_rep, confidence)
                    if any(np.isfinite(n.observed).any() for n, _ in ext)
                    else _no_spread(_cells(mean_rep, confidence)),
                    spread=mean_null([n for n, _ in ext]),
                    certs=mean_certs,
                    stock=mean_stock,
                    chance=_mean_chance(rows, model, kind, [t for t, _, _ in kept]),
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
            if not by_model:
                continue
            common = set.intersection(
                *({_base_task(t) for t, _, _ in ents} for ents in by_model.values())
            )
            for m, ents in by_model.items():
                common_tables[(m, kind)] = {
                    _base_task(t): tab for t, _, tab in ents if _base_task(t) in common
                }
        comparison = compare_models(common_tables, models, n_boot, confidence, seed)
    stock_comparison = _compare_stock(
        stock_tasks, stock_reps, models, kinds_seen, n_boot, confidence, seed
    )
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
        stock_comparison=stock_comparison,
    )


def _compare_stock(
    stock_tasks: Mapping[tuple[str, str], Sequence[str]],
    stock_reps: Mapping[tuple[str, str], tuple[StockValues, Replicates, StockTable]],
    models: Sequence[str],
    kinds: Sequence[str],
    n_resamples: int,
    confidence: float,
    seed: int,
) -> dict[str, Comparison]:
    """Per stock metric, paired model differences of its drop and worst case on shared
    examples, mean over the tasks of that metric both models ran (as for BAC)."""
    if len(models) < 2 or not stock_reps:
        return {}
    labels = dict.fromkeys(sv.label for sv, _, _ in stock_reps.values())
    index = {m: STOCK_STATS.index(m) for m in STOCK_MEASURES}
    out: dict[str, Comparison] = {}
    for label in labels:
        tables: dict[tuple[str, str], dict[str, StockTable]] = {}
        for kind in kinds:
            by_model = {m: ts for (m, k), ts in stock_tasks.items() if k == kind}
            if len(by_model) < 2:
                continue
            common = set.intersection(*({_base_task(t) for t in ts} for ts in by_model.values()))
            for m, ts in by_model.items():
                mine = {
                    _base_task(t): hit[2]
                    for t in ts
                    if (hit := stock_reps.get((m, t))) is not None
                    and hit[0].label == label
                    and _base_task(t) in common
                }
                if mine:
                    tables[(m, kind)] = mine
        if len({m for m, _ in tables}) > 1:
            out[label] = compare_models(
                tables,
                models,
                n_resamples,
                confidence,
                seed,
                measures=index,
                stats=StockTable.statistics,
                subset=StockTable.subset,
            )
    return out


def _mean_stock(
    model: str,
    kind: str,
    tasks: Sequence[str],
    stock_reps: Mapping[tuple[str, str], tuple[StockValues, Replicates, StockTable]],
    confidence: float,
) -> tuple[dict[str, StockCells], list[str]]:
    """A mean row's stock metrics: per metric, the mean over the tasks of that metric only
    (tasks resampled independently, as for BAC), and notes where that is not every task."""
    by_label: dict[str, list[tuple[StockValues, Replicates]]] = {}
    for t in tasks:
        hit = stock_reps.get((model, t))
        if hit is not None:
            by_label.setdefault(hit[0].label, []).append((hit[0], hit[1]))
    out: dict[str, StockCells] = {}
    notes: list[str] = []
    for label, entries in by_label.items():
        rep, n_ok = _mean_replicates([r for _, r in entries])
        first = entries[0][0]
        listed = tuple(dict.fromkeys(m for sv, _ in entries for m in sv.listed))
        out[label] = StockCells(
            first.metric, first.filter, listed, len(entries), _cells(rep, confidence)
        )
        if len(entries) < len(tasks):
            notes.append(
                f"{model}, {kind}: the {label} columns average the {len(entries)} of "
                f"{len(tasks)} tasks whose own metric is {label}"
            )
        short = [
            f"{label} {STOCK_COLUMNS[n]}"
            for n, c in zip(STOCK_STATS, n_ok, strict=True)
            if c < len(entries) and n in STOCK_COLUMNS
        ]
        if short:
            notes.append(
                f"{model}, {kind}: the mean of {', '.join(short)} leaves out tasks where it is "
                "undefined"
            )
    return out, notes


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


def within_noise(r: LeaderboardRow, level: float = 0.05) -> bool:
    """The row's spread is no larger than variant labels permuted within examples give."""
    if r.spread is None:
        return False
    p = r.spread.p_value()
    return math.isfinite(p) and p >= level
