"""Paired model differences on the examples two models share, and rank intervals.

A leaderboard's first question is whether model A is more robust than model B. Comparing the
two rows' intervals by eye is wrong twice: the intervals are not of the difference, and the
models were scored on the same examples, so their errors are correlated. Here, per kind of
perturbation and per measure (:data:`MEASURES`):

* **paired difference** A − B: per task, the examples both models scored (matched by example
  id); each bootstrap resample draws the same examples for both models (clustered: an example
  moves with all its variants), tasks independently, and the difference is averaged over the
  tasks both ran. BCa interval at the leaderboard's level.
* **p-value**: two-sided, from the bootstrap distribution of the difference (twice the smaller
  tail share at 0, ``(1 + hits) / (1 + B)``).
* **multiplicity**: Holm's step-down rule over all model pairs of one kind and measure, at
  ``1 - confidence``; a pair is ``distinguishable`` only when its Holm-adjusted p-value is
  below that level.
* **rank interval** of a model: ``[1 + #models distinguishably better, M − #models
  distinguishably worse]`` under the same Holm decisions (higher is better for every measure
  here), so the ranks hold jointly at the family-wise level.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lm_eval_robust.stats.bootstrap import bca_interval, jackknife_weights, resample_weights
from lm_eval_robust.stats.robustness import BOOTSTRAP_STATS, RobustTable, statistics

__all__ = [
    "MEASURES",
    "Comparison",
    "PairDiff",
    "RankInterval",
    "compare_models",
    "holm",
    "subset_table",
]

#: measures compared, with their names in tables; higher is more robust for each
MEASURES: dict[str, str] = {
    "delta_drop": "δ_drop",
    "bac_worst": "worst-case BAC",
    "consistency": "consistency",
}


def subset_table(t: RobustTable, ids: Sequence[str]) -> RobustTable:
    """The examples ``ids`` of ``t``, in that order."""
    pos = {e: i for i, e in enumerate(t.example_ids)}
    idx = np.array([pos[e] for e in ids], dtype=np.int64)
    arrays = {
        name: getattr(t, name)[idx]
        for name in (
            "gold", "onehot", "has_clean", "clean_credit", "clean_shares", "pert_credit",
            "pert_count", "pert_shares", "worst_credit", "agree", "ties", "docs", "var_credit",
            "var_count", "certified_h", "certified_c",
        )
    }  # fmt: skip
    return replace(t, example_ids=tuple(ids), **arrays)


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values (NaN stays NaN)."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    m = ok.size
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


@dataclass(frozen=True)
class PairDiff:
    kind: str
    measure: str
    model_a: str
    model_b: str
    n_tasks: int
    n_examples: int
    diff: float
    low: float
    high: float
    p: float
    p_holm: float
    distinguishable: bool


@dataclass(frozen=True)
class RankInterval:
    kind: str
    measure: str
    model: str
    value: float
    rank: int
    low: int
    high: int


@dataclass(frozen=True)
class Comparison:
    pairs: tuple[PairDiff, ...]
    ranks: tuple[RankInterval, ...]
    level: float
    n_resamples: int


#: a table's statistics under cluster weights ``[b, E]`` -> ``[b, S]``
StatsFn = Callable[[Any, np.ndarray], np.ndarray]
#: a table's examples ``ids``, in that order
SubsetFn = Callable[[Any, Sequence[str]], Any]


def _pair_replicates(
    a: Any,
    b: Any,
    cols: list[int],
    n_resamples: int,
    seed: int,
    statistics: StatsFn = statistics,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    e = a.n_examples
    est = statistics(a, np.ones((1, e)))[0, cols] - statistics(b, np.ones((1, e)))[0, cols]
    rng = np.random.default_rng(seed)
    boot = np.concatenate(
        [
            statistics(a, w)[:, cols] - statistics(b, w)[:, cols]
            for w in resample_weights(e, n_resamples, rng, max_elements=1 << 18)
        ]
    )
    jack = np.concatenate(
        [
            statistics(a, w)[:, cols] - statistics(b, w)[:, cols]
            for w in jackknife_weights(e, max_elements=1 << 18)
        ]
    )
    return est, boot, jack


def _mean_over_tasks(
    reps: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over tasks per measure (tasks where it is undefined left out); tasks resampled
    independently; jackknife leaves out one example of one task."""
    est = np.stack([r[0] for r in reps])
    ok = np.isfinite(est)
    n_ok = np.maximum(ok.sum(0), 1)
    total = np.where(ok, est, 0.0).sum(0)
    mean = np.where(ok.any(0), total / n_ok, np.nan)
    n_b = min(r[1].shape[0] for r in reps)
    boot = sum(np.where(ok[t], r[1][:n_b], 0.0) for t, r in enumerate(reps)) / n_ok
    jack = np.concatenate(
        [
            np.where(ok[t], (total - np.where(ok[t], est[t], 0.0) + r[2]) / n_ok, mean)
            for t, r in enumerate(reps)
        ]
    )
    return mean, np.asarray(boot), jack


def _p_two_sided(boot: np.ndarray, est: float) -> float:
    col = boot[np.isfinite(boot)]
    if col.size == 0 or not math.isfinite(est):
        return math.nan
    if float(col.max()) == float(col.min()):
        return 1.0 if float(col[0]) == 0.0 else 1.0 / (1 + col.size)
    lo = (1 + (col <= 0).sum()) / (1 + col.size)
    hi = (1 + (col >= 0).sum()) / (1 + col.size)
    return float(min(1.0, 2 * min(lo, hi)))


def compare_models(
    tables: Mapping[tuple[str, str], Mapping[str, Any]],
    models: Sequence[str],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    measures: Mapping[str, int] | None = None,
    stats: StatsFn = statistics,
    subset: SubsetFn = subset_table,
) -> Comparison:
    """``tables[(model, kind)][base_task]``: each model's tables per kind and task.

    By default the tables are :class:`RobustTable` and the measures :data:`MEASURES`; other
    tables (a stock metric's) come with their ``measures`` (name -> column of ``stats``), their
    ``stats`` and their ``subset``; they need ``n_examples`` and ``example_ids``."""
    level = 1.0 - confidence
    index = dict(measures) if measures is not None else MEASURES_INDEX
    cols = list(index.values())
    kinds = sorted({k for _, k in tables})
    pairs: list[PairDiff] = []
    ranks: list[RankInterval] = []
    for kind in kinds:
        present = [m for m in models if (m, kind) in tables]
        raw: list[tuple[str, str, int, int, np.ndarray, np.ndarray, np.ndarray]] = []
        for i_a, i_b in itertools.combinations(range(len(present)), 2):
            ma, mb = present[i_a], present[i_b]
            ta, tb = tables[(ma, kind)], tables[(mb, kind)]
            reps = []
            n_ex = 0
            for t_i, task in enumerate(sorted(set(ta) & set(tb))):
                ids = sorted(set(ta[task].example_ids) & set(tb[task].example_ids))
                if len(ids) < 2:
                    continue
                n_ex += len(ids)
                reps.append(
                    _pair_replicates(
                        subset(ta[task], ids),
                        subset(tb[task], ids),
                        cols,
                        n_resamples,
                        seed + 1000 * t_i,
                        stats,
                    )
                )
            if not reps:
                continue
            est, boot, jack = _mean_over_tasks(reps)
            low, high, _ = bca_interval(est, boot, jack, confidence)
            raw.append((ma, mb, len(reps), n_ex, est, np.vstack([low, high]), boot))
        for j, measure in enumerate(index):
            ps = [_p_two_sided(r[6][:, j], float(r[4][j])) for r in raw]
            adj = holm(ps)
            better: dict[str, int] = {m: 0 for m in present}
            worse: dict[str, int] = {m: 0 for m in present}
            for r, p, pa in zip(raw, ps, adj, strict=True):
                d = float(r[4][j])
                sig = bool(math.isfinite(pa) and pa < level)
                degenerate = not np.isfinite(r[5][:, j]).all()
                pairs.append(
                    PairDiff(
                        kind=kind,
                        measure=measure,
                        model_a=r[0],
                        model_b=r[1],
                        n_tasks=r[2],
                        n_examples=r[3],
                        diff=d,
                        low=math.nan if degenerate else float(r[5][0, j]),
                        high=math.nan if degenerate else float(r[5][1, j]),
                        p=p,
                        p_holm=float(pa),
                        distinguishable=sig,
                    )
                )
                if sig:
                    win, lose = (r[0], r[1]) if d > 0 else (r[1], r[0])
                    better[lose] += 1
                    worse[win] += 1
            values = _model_values(tables, present, kind, index[measure], stats)
            order = sorted(
                present, key=lambda m: -values[m] if math.isfinite(values[m]) else math.inf
            )
            for m in present:
                rank = order.index(m) + 1
                ranks.append(
                    RankInterval(
                        kind=kind,
                        measure=measure,
                        model=m,
                        value=values[m],
                        rank=rank,
                        low=min(rank, 1 + better[m]),
                        high=max(rank, len(present) - worse[m]),
                    )
                )
    return Comparison(tuple(pairs), tuple(ranks), level, n_resamples)


MEASURES_INDEX = {m: BOOTSTRAP_STATS.index(m) for m in MEASURES}


def _model_values(
    tables: Mapping[tuple[str, str], Mapping[str, Any]],
    models: Sequence[str],
    kind: str,
    col: int,
    statistics: StatsFn = statistics,
) -> dict[str, float]:
    """Each model's mean over the tasks all ``models`` ran (the point the ranks order)."""
    common = set.intersection(*(set(tables[(m, kind)]) for m in models))
    out = {}
    for m in models:
        vals = [
            float(statistics(t, np.ones((1, t.n_examples)))[0, col])
            for task, t in tables[(m, kind)].items()
            if task in common
        ]
        vals = [v for v in vals if math.isfinite(v)]
        out[m] = float(np.mean(vals)) if vals else math.nan
    return out
