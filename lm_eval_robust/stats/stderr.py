"""Standard errors of our task metrics for lm-eval's results (``<metric>_stderr,<filter>``).

lm-eval computes a standard error only for aggregations it knows (``mean``, ``median``, ...), so
every custom aggregation gets ``"N/A"``. :func:`stderr_for` gives the clustered bootstrap
standard error of each of our metrics instead: examples are resampled with all their variants
(:mod:`.robustness`), ``min(bootstrap_iters, STDERR_RESAMPLES)`` times, with a fixed seed, so the
same run writes the same value. ``lm_eval.simple_evaluate(..., bootstrap_iters=0)`` turns them
off, as for lm-eval's own (lm-eval 0.4.13's command line has no ``--bootstrap_iters`` flag).

All metrics of a task come from one bootstrap: lm-eval calls the aggregation of each metric with
a list of the same per-doc dicts (our ``process_results`` returns one dict under every metric
key), so the replicates are cached by the identity of those dicts.

The generation scores (``<score>_clean``, ``_pert``, ``_drop`` of EM, F1 and ROUGE, in percent)
get the same clustered bootstrap: per example, the mean score of its clean and of its perturbed
prompts, resampled by example (:func:`generation_replicates`).

Metrics without a clustered bootstrap here (margin AUC, the population certificates ``pop_cert_*``,
which are already lower confidence bounds) keep ``"N/A"``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lm_eval_robust.base.harness_names import AGGREGATION_SUFFIX, short_metric
from lm_eval_robust.stats.bootstrap import resample_weights
from lm_eval_robust.stats.robustness import BOOTSTRAP_STATS, Replicates, replicates, table_of

__all__ = [
    "STDERR_RESAMPLES",
    "generation_replicates",
    "generation_stat",
    "metric_of",
    "stderr_for",
    "task_replicates",
]

STDERR_RESAMPLES = 1000
_SEED = 0

#: modules whose functions named like a statistic are its aggregation
_MODULES = (
    "lm_eval_robust.stats.classification",
    "lm_eval_robust.stats.robustness",
    "lm_eval_robust.stats.certify",
)
_GENERATION = "lm_eval_robust.tasks.generation.metrics"
_GEN_SCORES = ("em", "f1", "rouge1", "rouge2", "rougeL")
_GEN_PARTS = ("clean", "pert", "drop")
_REGISTERED = "lm_eval_robust.harness.harness_metrics"

_cache: OrderedDict[tuple[int, int], tuple[object, Replicates]] = OrderedDict()


def metric_of(fn: Any) -> str | None:
    """The statistic an aggregation function computes, if it is one of ours with a bootstrap."""
    module = getattr(fn, "__module__", None)
    name = str(getattr(fn, "__name__", ""))
    if module == _REGISTERED and name.endswith(AGGREGATION_SUFFIX):  # robust_<name>_agg
        name = short_metric(name.removesuffix(AGGREGATION_SUFFIX))
    elif module not in (*_MODULES, _GENERATION):
        return None
    return name if name in BOOTSTRAP_STATS or generation_stat(name) else None


def generation_stat(name: str) -> tuple[str, str] | None:
    """``(score, part)`` of a generation metric name such as ``em_drop``; None otherwise."""
    score, _, part = name.rpartition("_")
    return (score, part) if score in _GEN_SCORES and part in _GEN_PARTS else None


def generation_replicates(
    items: Sequence[Mapping[str, Any]], score: str, n_resamples: int, seed: int = _SEED
) -> np.ndarray:
    """``[B, 3]`` bootstrap values of (clean, perturbed, perturbed - clean), in percent.

    Per example: the mean score of its clean prompts and of its perturbed prompts (docs
    de-duplicated by id); examples are resampled with all their prompts.
    """
    seen: dict[tuple[str, int], float] = {}
    for it in items:
        seen[(str(it["example_id"]), int(it["pert_id"]))] = float(it["scores"][score])
    ids = sorted({ex for ex, _ in seen})
    pos = {ex: i for i, ex in enumerate(ids)}
    sums = np.zeros((len(ids), 4))  # clean sum, clean count, perturbed sum, perturbed count
    for (ex, pid), v in seen.items():
        col = 0 if pid == 0 else 2
        sums[pos[ex], col] += v
        sums[pos[ex], col + 1] += 1
    if len(ids) < 2:
        return np.full((0, 3), np.nan)
    has_c, has_p = sums[:, 1] > 0, sums[:, 3] > 0
    mean_c = np.where(has_c, sums[:, 0] / np.maximum(sums[:, 1], 1), 0.0)
    mean_p = np.where(has_p, sums[:, 2] / np.maximum(sums[:, 3], 1), 0.0)
    out = []
    for w in resample_weights(len(ids), n_resamples, np.random.default_rng(seed)):
        with np.errstate(invalid="ignore", divide="ignore"):
            c = (w @ (mean_c * has_c)) / (w @ has_c.astype(float))
            p = (w @ (mean_p * has_p)) / (w @ has_p.astype(float))
        out.append(100.0 * np.column_stack([c, p, p - c]))
    return np.concatenate(out)


def task_replicates(items: Sequence[Mapping[str, Any]], n_resamples: int) -> Replicates:
    """The bootstrap of one task's items, computed once for all of its metrics."""
    table = table_of(items)
    key = (n_resamples, id(table))
    hit = _cache.get(key)
    if hit is None:  # the entry holds its table, so the id is not reused while it is cached
        hit = (table, replicates(table, n_resamples, seed=_SEED))
        _cache[key] = hit
        while len(_cache) > 2:
            _cache.popitem(last=False)
    return hit[1]


def stderr_for(metric: str, bootstrap_iters: int) -> Callable[[Sequence[Any]], float | str]:
    """``items -> standard error`` of ``metric`` (``"N/A"`` where it is undefined)."""
    n = max(2, min(int(bootstrap_iters), STDERR_RESAMPLES))
    gen = generation_stat(metric)
    if gen is not None:
        return _generation_stderr(metric, *gen, n)
    col = BOOTSTRAP_STATS.index(metric)

    def stderr(items: Sequence[Any]) -> float | str:
        se = float(task_replicates(list(items), n).stderr()[col])
        return se if math.isfinite(se) else "N/A"

    stderr.__name__ = f"stderr_{metric}"
    return stderr


def _generation_stderr(
    metric: str, score: str, part: str, n: int
) -> Callable[[Sequence[Any]], float | str]:
    col = _GEN_PARTS.index(part)

    def stderr(items: Sequence[Any]) -> float | str:
        boot = generation_replicates(list(items), score, n)[:, col]
        boot = boot[np.isfinite(boot)]
        return float(np.std(boot, ddof=1)) if boot.size >= 2 else "N/A"

    stderr.__name__ = f"stderr_{metric}"
    return stderr
