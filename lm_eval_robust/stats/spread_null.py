"""The spread across variants that noise alone gives, at the size it is measured at.

The best, worst and median variant BAC and their spread (best minus worst, FormatSpread's
measure; :mod:`.robustness`) are positive even when the variant has no effect at all: with few
examples per variant, the variants' BACs scatter by sampling noise and the range of that scatter
is the spread. The null here is "the variant label carries no information about the answer":
within each example, the labels of its perturbed docs are permuted (a doc keeps its answer and
gets another of the example's variants), which keeps every example's difficulty and its number
of right answers, and the statistic is recomputed.

:func:`spread_null` gives, per task, the observed best/worst/median/spread, their mean under the
null, one-sided permutation p-values (spread and best: as large or larger; worst: as small or
smaller; ``(1 + hits) / (1 + B)``), and ``excess = spread - null mean``. :func:`mean_null`
averages tasks (independent permutations per task, the draws paired by index), as the
leaderboard's mean rows average tasks. :func:`noise_spread` gives the spread expected with no
variant effect for ``n`` examples per variant, for the docs' table of the size a spread needs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lm_eval_robust.stats.bootstrap import bac_from_counts
from lm_eval_robust.stats.robustness import CLEAN_VARIANT, variant_of
from lm_eval_robust.values.complete import complete_items
from lm_eval_robust.values.ties import tie_credit

__all__ = [
    "STATS",
    "DocTable",
    "SpreadNull",
    "doc_table",
    "examples_needed",
    "mean_null",
    "noise_spread",
    "spread_null",
    "variant_stats",
]

#: the statistics, in column order
STATS: tuple[str, ...] = ("fmt_best", "fmt_worst", "fmt_median", "fmt_spread")


@dataclass(frozen=True, eq=False)
class DocTable:
    """The perturbed docs of one task: ``example [D]`` (index), ``variant [D]`` (index into
    ``variants``), ``credit [D]`` (ties 1/k); ``gold [E]`` per example."""

    example: np.ndarray
    variant: np.ndarray
    credit: np.ndarray
    gold: np.ndarray
    variants: tuple[str, ...]


def doc_table(items: Iterable[Mapping[str, Any]]) -> DocTable:
    rows = [r for r in complete_items(list(items)) if int(r["pert_id"]) > 0]
    ids = sorted({str(r["example_id"]) for r in rows})
    index = {e: i for i, e in enumerate(ids)}
    variants = tuple(sorted({variant_of(r) for r in rows} - {CLEAN_VARIANT}))
    vix = {v: i for i, v in enumerate(variants)}
    q = max([len(r["ll"]) for r in rows] + [1])
    ll = np.full((len(rows), q), -np.inf)
    for j, r in enumerate(rows):
        vals = np.asarray(r["ll"], dtype=np.float64)
        ll[j, : vals.size] = vals
    gold_doc = np.array([int(r["gold"]) for r in rows], dtype=np.int64)
    gold = np.zeros(len(ids), dtype=np.int64)
    ex = np.array([index[str(r["example_id"])] for r in rows], dtype=np.int64)
    gold[ex] = gold_doc
    return DocTable(
        example=ex,
        variant=np.array([vix[variant_of(r)] for r in rows], dtype=np.int64),
        credit=tie_credit(ll, gold_doc) if rows else np.zeros(0),
        gold=gold,
        variants=variants,
    )


def variant_stats(t: DocTable, variant: np.ndarray) -> np.ndarray:
    """``[b, 4]`` best, worst, median, spread of the variant BACs for label draws
    ``variant [b, D]`` (a variant counts only if its docs cover every gold class; NaN with fewer
    than two such variants)."""
    variant = np.atleast_2d(variant)
    b = variant.shape[0]
    e, v = t.gold.size, len(t.variants)
    q = int(t.gold.max()) + 1 if t.gold.size else 1
    cls = t.gold[t.example]  # [D]
    cell = variant * q + cls[None, :]  # [b, D]
    offs = (np.arange(b) * v * q)[:, None]
    num = np.bincount((cell + offs).ravel(), np.tile(t.credit, b), b * v * q).reshape(b, v, q)
    den = np.bincount((cell + offs).ravel(), None, b * v * q).reshape(b, v, q)
    present = np.bincount(t.gold, minlength=q) > 0 if e else np.zeros(q, bool)
    complete = np.all((den > 0) | ~present[None, None, :], axis=-1)
    bacs = np.where(complete, bac_from_counts(num, den), np.nan)  # [b, V]
    out = np.full((b, 4), np.nan)
    ok = np.isfinite(bacs).sum(axis=1) >= 2
    if ok.any():
        x = bacs[ok]
        out[ok, 0] = np.nanmax(x, axis=1)
        out[ok, 1] = np.nanmin(x, axis=1)
        out[ok, 2] = np.nanmedian(x, axis=1)
        out[ok, 3] = out[ok, 0] - out[ok, 1]
    return out


def _permuted(t: DocTable, n: int, rng: np.random.Generator) -> np.ndarray:
    """``[n, D]`` variant labels permuted within each example."""
    d = t.example.size
    pos = np.lexsort((np.arange(d), t.example))  # docs grouped by example, in order
    out = np.empty((n, d), dtype=np.int64)
    for i in range(n):
        order = np.lexsort((rng.random(d), t.example))
        row = np.empty(d, dtype=np.int64)
        row[pos] = t.variant[order]
        out[i] = row
    return out


@dataclass(frozen=True, eq=False)
class SpreadNull:
    """Observed ``[4]`` (:data:`STATS`) and null draws ``[B, 4]`` of one task or a mean."""

    observed: np.ndarray
    null: np.ndarray

    def _col(self, name: str) -> np.ndarray:
        col = self.null[:, STATS.index(name)]
        return col[np.isfinite(col)]

    def null_mean(self, name: str = "fmt_spread") -> float:
        col = self._col(name)
        return float(col.mean()) if col.size else math.nan

    def null_quantile(self, q: float, name: str = "fmt_spread") -> float:
        col = self._col(name)
        return float(np.quantile(col, q)) if col.size else math.nan

    def p_value(self, name: str = "fmt_spread") -> float:
        """One-sided permutation p-value (worst: as small or smaller; others: as large or
        larger); NaN where undefined."""
        obs = float(self.observed[STATS.index(name)])
        col = self._col(name)
        if not math.isfinite(obs) or col.size == 0:
            return math.nan
        tol = 1e-12
        hits = (col <= obs + tol) if name == "fmt_worst" else (col >= obs - tol)
        return float((1 + hits.sum()) / (1 + col.size))

    @property
    def excess(self) -> float:
        """Observed spread minus the spread expected with no variant effect."""
        return float(self.observed[STATS.index("fmt_spread")]) - self.null_mean()

    def as_dict(self, level: float = 0.05) -> dict[str, float | bool | None]:
        def clean(x: float) -> float | None:
            return x if math.isfinite(x) else None

        out: dict[str, float | bool | None] = {}
        for name in STATS:
            out[f"{name}_null_mean"] = clean(self.null_mean(name))
            out[f"{name}_p"] = clean(self.p_value(name))
        out["fmt_spread_null_q95"] = clean(self.null_quantile(0.95))
        out["spread_excess"] = clean(self.excess)
        p = self.p_value()
        out["spread_within_noise"] = bool(not math.isfinite(p) or p >= level)
        return out


def computable(t: DocTable) -> bool:
    """Whether a spread can be told from noise: some example has two perturbed prompts or more.
    With one per example (K = 1) every variant is scored on other examples, and permuting the
    variant labels within examples changes nothing, so best, worst, median and spread are n/a."""
    return t.example.size > 0 and int(np.bincount(t.example).max()) >= 2


def spread_null(
    items: Iterable[Mapping[str, Any]] | DocTable, n_permutations: int = 2000, seed: int = 0
) -> SpreadNull:
    t = items if isinstance(items, DocTable) else doc_table(items)
    if not computable(t):  # one variant per example: a permutation within examples is a no-op
        return SpreadNull(np.full(len(STATS), np.nan), np.full((1, len(STATS)), np.nan))
    observed = variant_stats(t, t.variant[None, :])[0]
    rng = np.random.default_rng(seed)
    null = np.concatenate(
        [
            variant_stats(t, _permuted(t, min(256, n_permutations - i), rng))
            for i in range(0, n_permutations, 256)
        ]
    )
    return SpreadNull(observed, null)


def mean_null(tasks: Sequence[SpreadNull]) -> SpreadNull:
    """The mean over tasks (NaN tasks left out per statistic, as the leaderboard's means)."""
    obs = np.stack([t.observed for t in tasks])
    ok = np.isfinite(obs)
    with np.errstate(invalid="ignore"):
        observed = np.where(ok, obs, 0).sum(0) / np.where(ok.sum(0) > 0, ok.sum(0), np.nan)
        b = min(t.null.shape[0] for t in tasks)
        nulls = np.stack([np.where(ok[i], t.null[:b], 0.0) for i, t in enumerate(tasks)])
        bad = np.zeros((b, 4), dtype=bool)
        for i, t in enumerate(tasks):
            bad |= ok[i] & ~np.isfinite(t.null[:b])
        null = nulls.sum(0) / np.where(ok.sum(0) > 0, ok.sum(0), np.nan)
    return SpreadNull(observed, np.where(bad, np.nan, null))


def noise_spread(
    n_per_variant: int,
    n_variants: int,
    accuracy: float = 0.7,
    n_draws: int = 20_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Mean and 95th percentile of the spread (best minus worst accuracy) of ``n_variants``
    variants with ``n_per_variant`` independent examples each and no variant effect (every
    answer right with probability ``accuracy``). An observed spread below the 95th percentile
    is within noise at that size."""
    rng = np.random.default_rng(seed)
    acc = rng.binomial(n_per_variant, accuracy, size=(n_draws, n_variants)) / n_per_variant
    spread = acc.max(axis=1) - acc.min(axis=1)
    return float(spread.mean()), float(np.quantile(spread, 0.95))


def examples_needed(
    spread: float, n_variants: int, accuracy: float = 0.7, limit: int = 100_000
) -> int:
    """The fewest examples per variant at which a spread of ``spread`` (a fraction) exceeds the
    95th percentile of :func:`noise_spread`, found by bisection (the percentile falls with
    ``n`` up to the binomial's steps)."""
    if not 0 < spread < 1:
        raise ValueError(f"spread must be in (0, 1); got {spread}")

    def above(n: int) -> bool:
        return noise_spread(n, n_variants, accuracy)[1] < spread

    hi = 2
    while not above(hi):
        hi *= 2
        if hi > limit:
            raise ValueError(f"a spread of {spread} needs more than {limit} examples per variant")
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if above(mid) else (mid, hi)
    return hi
