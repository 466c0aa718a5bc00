"""Our metrics and aggregations in lm-eval's own registries, through its decorators.

Importing this module registers, for every metric our task YAMLs report:

* an aggregation ``lmer_<metric>`` (``@register_aggregation``) that computes the task-level value
  from the per-doc rows ``process_results`` returns (``lm_eval_robust.metrics.classification``,
  ``.certify`` and ``lm_eval_robust.generation.metrics`` hold the real code);
* the metric ``<metric>`` itself (``@register_metric``), a pass-through of those rows, with its
  ``higher_is_better`` and its default aggregation ``lmer_<metric>``.

Each registered object is a module attribute whose ``__name__`` is the name it is registered
under, so the entry points in pyproject.toml (``lm_eval.metrics`` and ``lm_eval.aggregations``,
``"lm_eval_robust.harness_metrics:<name>"``) name exactly the decorated objects, as upstream's
plugin guide asks: a release that discovers entry points imports this module, whose decorators then
replace the lazy placeholders. Releases that discover nothing get the same registrations from the
start-up hook (:func:`lm_eval_robust._plugin.register_metrics`).

The task YAMLs still name their aggregations with ``!function``, so tasks do not depend on these
registrations; they let other YAMLs write ``metric: bac_clean`` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

# lm-eval fills its built-in metrics lazily, only while its registries are empty: load them first
# so that ours do not make the built-ins look already loaded.
import lm_eval.api.metrics  # noqa: F401
from lm_eval.api.registry import register_aggregation, register_metric

from lm_eval_robust.generation import metrics as gen
from lm_eval_robust.metrics import certify, classification, robustness

Items = Iterable[Mapping[str, Any]]

AGGREGATION_PREFIX = "lmer_"


class HarnessMetric(NamedTuple):
    name: str
    aggregate: Callable[[Items], float]
    higher_is_better: bool


METRICS: tuple[HarnessMetric, ...] = (
    HarnessMetric("bac_clean", classification.bac_clean, True),
    HarnessMetric("bac_pert", classification.bac_pert, True),
    HarnessMetric("delta_drop", classification.delta_drop, True),
    HarnessMetric("acc_clean", classification.acc_clean, True),
    HarnessMetric("acc_pert", classification.acc_pert, True),
    HarnessMetric("maj_share_clean", classification.maj_share_clean, False),
    HarnessMetric("maj_share_pert", classification.maj_share_pert, False),
    HarnessMetric("auc_clean", classification.auc_clean, True),
    HarnessMetric("auc_pert", classification.auc_pert, True),
    HarnessMetric("tie_share", classification.tie_share, False),
    HarnessMetric("bac_worst", robustness.bac_worst, True),
    HarnessMetric("consistency", robustness.consistency, True),
    HarnessMetric("fmt_best", robustness.fmt_best, True),
    HarnessMetric("fmt_worst", robustness.fmt_worst, True),
    HarnessMetric("fmt_median", robustness.fmt_median, True),
    HarnessMetric("fmt_spread", robustness.fmt_spread, False),
    HarnessMetric("p_cert_h", certify.p_cert_h, True),
    HarnessMetric("p_cert_c", certify.p_cert_c, True),
    HarnessMetric("p_cert_exact", certify.p_cert_exact, True),
    HarnessMetric("pop_cert_h", certify.pop_cert_h, True),
    HarnessMetric("pop_cert_c", certify.pop_cert_c, True),
    *(
        HarnessMetric(f"{score}_{part}", getattr(gen, f"{score}_{part}"), True)
        for score in ("em", "f1", "rouge1", "rouge2", "rougeL")
        for part in ("clean", "pert", "drop")
    ),
)


def _named(fn: Callable[..., Any], name: str) -> None:
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__module__ = __name__


def _aggregation(metric: HarnessMetric) -> Callable[[Items], float]:
    def aggregate(items: Items) -> float:
        return metric.aggregate(items)

    _named(aggregate, AGGREGATION_PREFIX + metric.name)
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
        agg_name = AGGREGATION_PREFIX + metric.name
        globals()[agg_name] = register_aggregation(agg_name)(_aggregation(metric))
        globals()[metric.name] = register_metric(
            metric=metric.name,
            higher_is_better=metric.higher_is_better,
            aggregation=agg_name,
        )(_pass_through(metric))


_register_all()
