"""Our metrics and aggregations in lm-eval's own registries, through its decorators.

Importing this module registers, for every metric of
:data:`lm_eval_robust.base.harness_names.METRICS` (the one list the task YAMLs and the entry points
are generated from):

* an aggregation ``robust_<metric>_agg`` (``@register_aggregation``) that computes the task-level
  value from the per-doc rows ``process_results`` returns
  (``lm_eval_robust.stats.classification``,
  ``.certify`` and ``lm_eval_robust.tasks.generation.metrics`` hold the real code);
* the metric ``robust_<metric>`` itself (``@register_metric``), a pass-through of those rows, with
  its ``higher_is_better`` and its default aggregation ``robust_<metric>_agg``.

Each registered object is a module attribute whose ``__name__`` is the name it is registered
under, so the entry points in pyproject.toml (``lm_eval.metrics`` and ``lm_eval.aggregations``,
``"lm_eval_robust.harness.harness_metrics:<name>"``, written by ``scripts/gen_harness_names.py``)
name exactly the decorated objects, as upstream's plugin guide asks.

Nothing imports this module at start-up: our task YAMLs name their aggregations with
``!function`` and need no registration, and lm-eval's registries stay as the built-ins left them
(lm-eval's own test suite checks that every registered metric is a pinned built-in).
:func:`lm_eval_robust.register` and ``lm-eval-robust run`` import it, so that other YAMLs may
write ``metric: robust_bac_clean`` alone.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

# lm-eval fills its built-in metrics lazily, only while its registries are empty: load them first
# so that ours do not make the built-ins look already loaded.
import lm_eval.api.metrics  # noqa: F401
from lm_eval.api.registry import register_aggregation, register_metric

from lm_eval_robust.base.harness_names import AGGREGATION_SUFFIX, Metric
from lm_eval_robust.base.harness_names import METRICS as NAMES

Items = Iterable[Mapping[str, Any]]


class HarnessMetric(NamedTuple):
    name: str
    aggregate: Callable[[Items], float]
    higher_is_better: bool


def _function(metric: Metric) -> Callable[[Items], float]:
    fn: Callable[[Items], float] = getattr(importlib.import_module(metric.module), metric.name)
    return fn


#: the harness name, the aggregation function and the direction of every metric
METRICS: tuple[HarnessMetric, ...] = tuple(
    HarnessMetric(m.harness_name, _function(m), m.higher_is_better) for m in NAMES
)


def _named(fn: Callable[..., Any], name: str) -> None:
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__module__ = __name__


def _aggregation(metric: HarnessMetric) -> Callable[[Items], float]:
    def aggregate(items: Items) -> float:
        return metric.aggregate(items)

    _named(aggregate, metric.name + AGGREGATION_SUFFIX)
    aggregate.__doc__ = f"Task-level ``{metric.name}`` from the per-doc rows."
    return aggregate


def _pass_through(metric: HarnessMetric) -> Callable[[Any], Any]:
    def per_doc(items: Any) -> Any:
        return items

    _named(per_doc, metric.name)
    per_doc.__doc__ = f"Per-doc ``{metric.name}``: the row ``process_results`` returned."
    return per_doc


def _register_all() -> None:
    for metric in METRICS:
        agg_name = metric.name + AGGREGATION_SUFFIX
        globals()[agg_name] = register_aggregation(agg_name)(_aggregation(metric))
        globals()[metric.name] = register_metric(
            metric=metric.name,
            higher_is_better=metric.higher_is_better,
            aggregation=agg_name,
        )(_pass_through(metric))


_register_all()
