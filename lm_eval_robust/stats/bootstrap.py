"""Clustered BCa bootstrap confidence intervals (paper: "95% CI ... bias-corrected accelerated
bootstrapping with 10k resamples").

Clusters, not docs, are resampled: a source example and all of its perturbed variants move
together, because variants of one example are strongly correlated (resampling docs would give
intervals that are far too narrow). A resample is therefore a vector of cluster *weights* (how
many times each cluster was drawn), and every statistic is a function of weighted per-cluster
sufficient statistics, e.g. per-example counts of correct variants per class for BAC. That keeps
the bootstrap vectorised (one matrix product per chunk of resamples) and memory-bounded
(resamples are drawn in chunks of at most ``max_elements`` weights).

Paired comparisons (base vs debiased) put both runs' sufficient statistics side by side in one
matrix, so each resample draws the same clusters for both runs.

The BCa interval follows ``scipy.stats.bootstrap(method='BCa')`` (Efron & Tibshirani 14.3 and
15.4) step for step: bias correction from the "mean" percentile of the estimate in the bootstrap
distribution, acceleration from the leave-one-cluster-out jackknife, linear quantiles. Drawing
the resample indices as scipy does (``rng.integers(0, G, (chunk, G))`` per chunk) gives the same
resamples, hence the same interval, for the same seed and ``chunk == batch``.

Task-level intervals across tasks (paper Tables 10, 11, 13) bootstrap the tasks' values with
``scipy.stats.bootstrap`` directly (:func:`task_level_ci`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtr, ndtri

from lm_eval_robust.base.defaults import DEFAULT_RESAMPLES

__all__ = [
    "BootstrapCI",
    "TaskLevelCI",
    "bac_from_counts",
    "bca_interval",
    "cluster_bootstrap_ci",
    "jackknife_weights",
    "linear_stat",
    "resample_weights",
    "task_level_ci",
]

MAX_ELEMENTS = 1 << 21  # weights held at once (16 MiB of float64)

StatFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class BootstrapCI:
    """Point estimates and BCa intervals for ``S`` statistics computed on the same resamples.

    ``low``/``high`` are NaN where no interval exists: a degenerate bootstrap distribution (every
    resample gives the same value, e.g. a rate that is 0 in every cluster) or too many resamples
    where the statistic is undefined (more than ``max_invalid``, e.g. a ratio whose denominator
    hits zero). ``invalid`` counts the undefined resamples that were left out.
    """

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_resamples: int
    confidence: float
    invalid: np.ndarray
    degenerate: np.ndarray
    acceleration: np.ndarray = field(repr=False)

    def __len__(self) -> int:
        return int(self.estimate.shape[0])

    def row(self, i: int) -> tuple[float, float, float]:
        return float(self.estimate[i]), float(self.low[i]), float(self.high[i])


def _chunk_size(n_clusters: int, n_resamples: int, chunk: int | None, max_elements: int) -> int:
    if chunk is not None:
        if chunk < 1:
            raise ValueError(f"chunk must be positive; got {chunk}")
        return int(chunk)
    return max(1, min(n_resamples, max_elements // max(n_clusters, 1)))


def resample_weights(
    n_clusters: int,
    n_resamples: int,
    rng: np.random.Generator,
    *,
    chunk: int | None = None,
    max_elements: int = MAX_ELEMENTS,
) -> Iterator[np.ndarray]:
    """Yield ``[b, G]`` float weight matrices: how often each of ``G`` clusters was drawn.

    Indices are drawn exactly as ``scipy.stats.bootstrap`` draws them (``rng.integers(0, G,
    (b, G))`` per chunk of ``b`` resamples), then counted per row.
    """
    if n_clusters < 1:
        raise ValueError("need at least one cluster")
    b_max = _chunk_size(n_clusters, n_resamples, chunk, max_elements)
    for start in range(0, n_resamples, b_max):
        b = min(b_max, n_resamples - start)
        idx = rng.integers(0, n_clusters, (b, n_clusters))
        flat = idx + (np.arange(b) * n_clusters)[:, None]
        counts = np.bincount(flat.ravel(), minlength=b * n_clusters)
        yield counts.reshape(b, n_clusters).astype(np.float64)


def jackknife_weights(
    n_clusters: int, *, chunk: int | None = None, max_elements: int = MAX_ELEMENTS
) -> Iterator[np.ndarray]:
    """Yield leave-one-cluster-out weight matrices (rows of ones with a single zero)."""
    b_max = _chunk_size(n_clusters, n_clusters, chunk, max_elements)
    for start in range(0, n_clusters, b_max):
        b = min(b_max, n_clusters - start)
        w = np.ones((b, n_clusters))
        w[np.arange(b), start + np.arange(b)] = 0.0
        yield w


def _as_2d(values: np.ndarray, rows: int) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64)
    if out.ndim == 1:
        out = out[:, None]
    if out.ndim != 2 or out.shape[0] != rows:
        raise ValueError(f"statistic must return [{rows}] or [{rows}, S]; got shape {out.shape}")
    return out


def _percentile_of_score(theta_b: np.ndarray, theta_hat: np.ndarray) -> np.ndarray:
    """scipy's 'mean' percentile of ``theta_hat`` among the bootstrap values (ties count half)."""
    below = np.sum(theta_b < theta_hat, axis=0)
    at_or_below = np.sum(theta_b <= theta_hat, axis=0)
    return (below + at_or_below) / (2.0 * theta_b.shape[0])


def _acceleration(jack: np.ndarray) -> np.ndarray:
    """Jackknife acceleration per column of ``jack [G, S]`` (0 where the jackknife is flat)."""
    u = jack.mean(axis=0, keepdims=True) - jack
    num = np.sum(u**3, axis=0)
    den = np.sum(u**2, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = num / (6.0 * den**1.5)
    return np.where(den > 0, a, 0.0)


def bca_interval(
    theta_hat: ArrayLike,
    theta_b: ArrayLike,
    jackknife: ArrayLike,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BCa ``(low, high, acceleration)`` per statistic.

    ``theta_hat [S]`` estimates, ``theta_b [B, S]`` bootstrap values (finite), ``jackknife [G, S]``
    leave-one-cluster-out values. NaN bootstrap values are ignored column by column.
    """
    th = np.atleast_1d(np.asarray(theta_hat, dtype=np.float64))
    tb = _as_2d(np.asarray(theta_b), np.asarray(theta_b).shape[0])
    jk = _as_2d(np.asarray(jackknife), np.asarray(jackknife).shape[0])
    alpha = (1.0 - confidence) / 2.0
    z_alpha = float(ndtri(alpha))
    a = _acceleration(jk)
    low = np.full(th.shape, np.nan)
    high = np.full(th.shape, np.nan)
    for s in range(th.shape[0]):
        col = tb[:, s]
        col = col[np.isfinite(col)]
        if col.size == 0 or not math.isfinite(th[s]):
            continue
        z0 = float(ndtri(_percentile_of_score(col[:, None], np.array([th[s]]))[0]))
        n1 = z0 + z_alpha
        n2 = z0 - z_alpha
        a1 = float(ndtr(z0 + n1 / (1.0 - a[s] * n1)))
        a2 = float(ndtr(z0 + n2 / (1.0 - a[s] * n2)))
        if not (math.isfinite(a1) and math.isfinite(a2)):
            continue
        low[s], high[s] = np.quantile(col, [a1, a2])
    return low, high, a


def cluster_bootstrap_ci(
    stat_fn: StatFn,
    n_clusters: int,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
    chunk: int | None = None,
    max_elements: int = MAX_ELEMENTS,
    max_invalid: float = 0.01,
) -> BootstrapCI:
    """Clustered BCa intervals for the statistics ``stat_fn`` computes from cluster weights.

    ``stat_fn(W)`` takes ``W [b, G]`` (float cluster weights; the all-ones row is the original
    sample) and returns ``[b]`` or ``[b, S]``. It must be vectorised over rows and depend on the
    clusters only through the weights (e.g. ``W @ sufficient_stats``). Use :func:`linear_stat` to
    build one from a per-cluster sufficient-statistic matrix.
    """
    if n_clusters < 2:
        raise ValueError(f"a bootstrap needs at least 2 clusters; got {n_clusters}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    theta_hat = _as_2d(stat_fn(np.ones((1, n_clusters))), 1)[0]
    parts = [
        _as_2d(stat_fn(w), w.shape[0])
        for w in resample_weights(
            n_clusters, n_resamples, rng, chunk=chunk, max_elements=max_elements
        )
    ]
    theta_b = np.concatenate(parts, axis=0)
    jack = np.concatenate(
        [
            _as_2d(stat_fn(w), w.shape[0])
            for w in jackknife_weights(n_clusters, chunk=chunk, max_elements=max_elements)
        ],
        axis=0,
    )
    invalid = np.sum(~np.isfinite(theta_b), axis=0)
    low, high, a = bca_interval(theta_hat, theta_b, jack, confidence)
    finite = np.where(np.isfinite(theta_b), theta_b, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        degenerate = np.nanmax(finite, axis=0) == np.nanmin(finite, axis=0)
    bad = degenerate | (invalid > max_invalid * n_resamples) | ~np.isfinite(theta_hat)
    low = np.where(bad, np.nan, low)
    high = np.where(bad, np.nan, high)
    return BootstrapCI(
        estimate=theta_hat,
        low=low,
        high=high,
        n_resamples=n_resamples,
        confidence=confidence,
        invalid=invalid,
        degenerate=degenerate,
        acceleration=a,
    )


def linear_stat(sufficient: ArrayLike, derive: Callable[[np.ndarray], np.ndarray]) -> StatFn:
    """``W -> derive(W @ sufficient)``: statistics that depend on weighted cluster sums only.

    ``sufficient [G, F]`` holds one row of additive sufficient statistics per cluster (counts of
    correct variants per class, certified indicators, ...); ``derive`` maps the weighted totals
    ``[b, F]`` to the statistics ``[b, S]``.
    """
    s = np.asarray(sufficient, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"sufficient statistics must be [clusters, features]; got {s.shape}")

    def stat(w: np.ndarray) -> np.ndarray:
        return derive(w @ s)

    return stat


def bac_from_counts(correct: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Balanced accuracy from per-class totals ``[..., Q]``: mean recall over the classes with a
    positive total (scikit-learn's ``balanced_accuracy_score``); NaN where no class is present."""
    c = np.asarray(correct, dtype=np.float64)
    t = np.asarray(total, dtype=np.float64)
    present = t > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        recall = np.where(present, c / np.where(present, t, 1.0), 0.0)
        n = present.sum(axis=-1)
        return np.where(n > 0, recall.sum(axis=-1) / np.maximum(n, 1), np.nan)


@dataclass(frozen=True)
class TaskLevelCI:
    """Mean of a metric across tasks with a BCa interval from bootstrapping the tasks."""

    mean: float
    low: float
    high: float
    n_tasks: int
    note: str = ""


def task_level_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> TaskLevelCI:
    """Task-level mean and BCa interval (``scipy.stats.bootstrap`` over tasks), as Tables 10-11.

    NaN values (metric undefined for a task) are left out. The interval is NaN with a note when
    fewer than 3 tasks remain or all values are equal (the paper prints "-" there).
    """
    from scipy.stats import bootstrap

    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return TaskLevelCI(math.nan, math.nan, math.nan, 0, "no task has a value")
    mean = float(v.mean())
    if v.size < 3:
        return TaskLevelCI(mean, math.nan, math.nan, int(v.size), "fewer than 3 tasks")
    if np.all(v == v[0]):
        return TaskLevelCI(mean, math.nan, math.nan, int(v.size), "all tasks equal")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap(
            (v,),
            np.mean,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="BCa",
            rng=np.random.default_rng(seed),
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    note = "" if math.isfinite(lo) and math.isfinite(hi) else "BCa undefined"
    return TaskLevelCI(mean, lo, hi, int(v.size), note)
