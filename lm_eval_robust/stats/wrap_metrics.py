"""Robustness measures of a wrapped task in the stock task's own metric, with clustered stderrs.

For every per-doc metric the stock task reports (``acc``, ``acc_norm``, ``exact_match`` under each
filter, ...) a wrapped task reports ``stock_<metric>_<stat>``:

* ``clean``: the metric over the clean prompts (the stock task's own number on these docs);
* ``pert``: over the perturbed prompts; ``drop``: ``pert - clean`` (negative: a drop);
* ``worst``: per example the worst value over its clean and perturbed prompts, averaged
  (HELM's robustness score; "worst" follows the metric's direction);
* ``consistency``: share of perturbed prompts scoring what their example's clean prompt scored;
* ``spread``: best minus worst variant (a format, or a text-perturbation kind), each variant's
  mean over its docs.

Each is a function of per-example sums, so its standard error is a clustered bootstrap (an
example moves with all its prompts), as for the NI tasks' measures; lm-eval writes it as
``stock_<metric>_<stat>_stderr``. The aggregation functions carry their stderr
(:func:`install_stderr` teaches lm-eval to ask them).
"""

from __future__ import annotations

import functools
import math
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lm_eval_robust.stats.bootstrap import resample_weights

__all__ = ["STOCK_STATS", "StockTable", "install_stderr", "stock_aggregation", "stock_metric"]

STOCK_STATS: tuple[str, ...] = ("clean", "pert", "drop", "worst", "consistency", "spread")
STDERR_RESAMPLES = 1000
STDERR_ATTR = "lmer_stderr"


def stock_metric(metric: str, stat: str) -> str:
    """The reported name of ``stat`` of a stock metric."""
    return f"stock_{metric}_{stat}"


@dataclass(frozen=True)
class StockTable:
    """Per-example sums of one stock metric (``E`` examples, ``V`` perturbed variants)."""

    has_clean: np.ndarray  # [E]
    clean: np.ndarray  # [E]
    pert_sum: np.ndarray  # [E]
    pert_count: np.ndarray  # [E]
    worst: np.ndarray  # [E] NaN without clean or perturbed prompts
    agree: np.ndarray  # [E]
    var_sum: np.ndarray  # [E, V]
    var_count: np.ndarray  # [E, V]
    example_ids: tuple[str, ...] = ()  # [E], sorted

    @classmethod
    def from_items(cls, items: Iterable[Mapping[str, Any]], higher_is_better: bool) -> StockTable:
        unique: dict[tuple[str, int], Mapping[str, Any]] = {}
        for it in items:
            unique[(str(it["example_id"]), int(it["pert_id"]))] = it
        ids = sorted({e for e, _ in unique})
        pos = {e: i for i, e in enumerate(ids)}
        variants = sorted({str(r["variant"]) for (_, p), r in unique.items() if p > 0})
        vix = {v: i for i, v in enumerate(variants)}
        e, v = len(ids), len(variants)
        has_clean = np.zeros(e, dtype=bool)
        clean = np.zeros(e)
        pert_sum, pert_count, agree = np.zeros(e), np.zeros(e), np.zeros(e)
        var_sum, var_count = np.zeros((e, v)), np.zeros((e, v))
        by_ex: dict[int, list[float]] = {}
        for (ex, pid), r in unique.items():
            i = pos[ex]
            value = float(r["value"])
            by_ex.setdefault(i, []).append(value)
            if pid == 0:
                has_clean[i] = True
                clean[i] = value
            else:
                pert_sum[i] += value
                pert_count[i] += 1
                var_sum[i, vix[str(r["variant"])]] += value
                var_count[i, vix[str(r["variant"])]] += 1
        for (ex, pid), r in unique.items():
            i = pos[ex]
            if pid > 0 and has_clean[i]:
                agree[i] += float(float(r["value"]) == clean[i])
        worst = np.full(e, np.nan)
        pick = min if higher_is_better else max
        for i, values in by_ex.items():
            if has_clean[i] and pert_count[i] > 0:
                worst[i] = pick(values)
        return cls(
            has_clean, clean, pert_sum, pert_count, worst, agree, var_sum, var_count, tuple(ids)
        )

    def subset(self, ids: Sequence[str]) -> StockTable:
        """The examples ``ids``, in that order."""
        pos = {e: i for i, e in enumerate(self.example_ids)}
        idx = np.array([pos[e] for e in ids], dtype=np.int64)
        return StockTable(
            self.has_clean[idx],
            self.clean[idx],
            self.pert_sum[idx],
            self.pert_count[idx],
            self.worst[idx],
            self.agree[idx],
            self.var_sum[idx],
            self.var_count[idx],
            tuple(ids),
        )

    @property
    def n_examples(self) -> int:
        return int(self.clean.shape[0])

    def statistics(self, w: np.ndarray) -> np.ndarray:
        """``[b, 6]`` the :data:`STOCK_STATS` under cluster weights ``w [b, E]``."""
        w = np.asarray(w, dtype=np.float64)
        c = w * self.has_clean
        ok = np.isfinite(self.worst)
        with np.errstate(divide="ignore", invalid="ignore"):
            clean = (c @ self.clean) / c.sum(axis=1)
            pert = (w @ self.pert_sum) / (w @ self.pert_count)
            worst = ((w * ok) @ np.where(ok, self.worst, 0.0)) / (w * ok).sum(axis=1)
            consistency = (c @ self.agree) / (c @ self.pert_count)
            var = (w @ self.var_sum) / (w @ self.var_count)
        spread = np.full(w.shape[0], np.nan)
        if var.shape[1] >= 2:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                enough = np.isfinite(var).sum(axis=1) >= 2
                spread[enough] = np.nanmax(var[enough], axis=1) - np.nanmin(var[enough], axis=1)
        return np.column_stack([clean, pert, pert - clean, worst, consistency, spread])


def _table(items: Sequence[Mapping[str, Any]], hib: bool) -> StockTable:
    return StockTable.from_items(items, hib)


def stock_aggregation(stat: str, higher_is_better: bool) -> Callable[[Iterable[Any]], float]:
    """The aggregation of one statistic (its clustered stderr attached as ``lmer_stderr``)."""
    col = STOCK_STATS.index(stat)

    def aggregate(items: Iterable[Any]) -> float:
        t = _table(list(items), higher_is_better)
        if t.n_examples == 0:
            return math.nan
        return float(t.statistics(np.ones((1, t.n_examples)))[0, col])

    def stderr(bootstrap_iters: int) -> Callable[[Sequence[Any]], float | str]:
        n = max(2, min(int(bootstrap_iters), STDERR_RESAMPLES))

        def se(items: Sequence[Any]) -> float | str:
            t = _table(list(items), higher_is_better)
            if t.n_examples < 2:
                return "N/A"
            rng = np.random.default_rng(0)
            boot = np.concatenate(
                [t.statistics(w)[:, col] for w in resample_weights(t.n_examples, n, rng)]
            )
            boot = boot[np.isfinite(boot)]
            return float(np.std(boot, ddof=1)) if boot.size >= 2 else "N/A"

        return se

    aggregate.__name__ = f"stock_{stat}"
    aggregate.__qualname__ = aggregate.__name__
    setattr(aggregate, STDERR_ATTR, stderr)
    return aggregate


def _with_stock_stderr(original: Any) -> Any:
    @functools.wraps(original)
    def stderr_for_metric(metric: Any, bootstrap_iters: int) -> Any:
        own = getattr(metric, STDERR_ATTR, None)
        if own is None or bootstrap_iters <= 0:
            return original(metric, bootstrap_iters)
        return own(bootstrap_iters)

    stderr_for_metric.__lmer_wrap__ = True  # type: ignore[attr-defined]
    return stderr_for_metric


def install_stderr() -> None:
    """Make lm-eval ask our wrapped-task aggregations for their stderr (idempotent)."""
    import lm_eval.api.metrics

    for module in (lm_eval.api.metrics, sys.modules.get("lm_eval.evaluator_utils")):
        current = getattr(module, "stderr_for_metric", None)
        if module is None or current is None or getattr(current, "__lmer_wrap__", False):
            continue
        module.stderr_for_metric = _with_stock_stderr(current)  # type: ignore[union-attr]
