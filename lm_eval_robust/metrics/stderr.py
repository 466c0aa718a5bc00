"""Standard errors of our task metrics for lm-eval's results (``<metric>_stderr,<filter>``).

lm-eval computes a standard error only for aggregations it knows (``mean``, ``median``, ...), so
every custom aggregation gets ``"N/A"``. :func:`stderr_for` gives the clustered bootstrap
standard error of each of our metrics instead: examples are resampled with all their variants
(:mod:`.robustness`), ``min(bootstrap_iters, STDERR_RESAMPLES)`` times, with a fixed seed, so the
same run writes the same value. ``--bootstrap_iters 0`` turns them off, as for lm-eval's own.

All metrics of a task come from one bootstrap: lm-eval calls the aggregation of each metric with
a list of the same per-doc dicts (our ``process_results`` returns one dict under every metric
key), so the replicates are cached by the identity of those dicts.

Metrics without a clustered bootstrap here (margin AUC, the population certificates ``pop_cert_*``,
which are already lower confidence bounds, generation scores) keep ``"N/A"``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lm_eval_robust.metrics.robustness import BOOTSTRAP_STATS, Replicates, RobustTable, replicates

__all__ = ["STDERR_RESAMPLES", "metric_of", "stderr_for", "task_replicates"]

STDERR_RESAMPLES = 1000
_SEED = 0

#: modules whose functions named like a statistic are its aggregation
_MODULES = (
    "lm_eval_robust.metrics.classification",
    "lm_eval_robust.metrics.robustness",
    "lm_eval_robust.metrics.certify",
)
_REGISTERED = "lm_eval_robust.harness_metrics"
_REGISTERED_PREFIX = "lmer_"

_cache: OrderedDict[tuple[int, ...], Replicates] = OrderedDict()


def metric_of(fn: Any) -> str | None:
    """The statistic an aggregation function computes, if it is one of ours with a bootstrap."""
    module = getattr(fn, "__module__", None)
    name = str(getattr(fn, "__name__", ""))
    if module == _REGISTERED and name.startswith(_REGISTERED_PREFIX):
        name = name[len(_REGISTERED_PREFIX) :]
    elif module not in _MODULES:
        return None
    return name if name in BOOTSTRAP_STATS else None


def task_replicates(items: Sequence[Mapping[str, Any]], n_resamples: int) -> Replicates:
    """The bootstrap of one task's items, computed once for all of its metrics."""
    key = (n_resamples, *(id(x) for x in items))
    hit = _cache.get(key)
    if hit is None:
        hit = replicates(RobustTable.from_items(items), n_resamples, seed=_SEED)
        _cache[key] = hit
        while len(_cache) > 2:
            _cache.popitem(last=False)
    return hit


def stderr_for(metric: str, bootstrap_iters: int) -> Callable[[Sequence[Any]], float | str]:
    """``items -> standard error`` of ``metric`` (``"N/A"`` where it is undefined)."""
    n = max(2, min(int(bootstrap_iters), STDERR_RESAMPLES))
    col = BOOTSTRAP_STATS.index(metric)

    def stderr(items: Sequence[Any]) -> float | str:
        se = float(task_replicates(list(items), n).stderr()[col])
        return se if math.isfinite(se) else "N/A"

    stderr.__name__ = f"stderr_{metric}"
    return stderr
