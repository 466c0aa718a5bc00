"""Every name we put into lm-eval's shared namespaces, in one list, and the names older runs used.

lm-eval keeps one global registry of metrics, one of aggregations and one index of task names
for every plugin and every built-in. Our names there carry the namespace ``robust_``:

* a metric is ``robust_<name>`` (``robust_bac_clean``, ``robust_em_drop``): the key of the
  task's ``metric_list``, of ``process_results``' per-doc dict and of the results JSON
  (``"robust_bac_clean,none"``); ``<name>`` alone (``bac_clean``) is what our own Python API,
  reports and docs call it, and the name of the function that aggregates it;
* its aggregation, where one is registered (:func:`lm_eval_robust.register`), is
  ``robust_<name>_agg``;
* a generation task is ``robust_<dataset>_<clean|text_pert>[_train]`` (``robust_gsm8k_clean``),
  so that a built-in wildcard such as ``--tasks "gsm8k*"`` does not pick it up. The NI tasks
  keep the names users type (``ni065_format_pert``): no built-in task starts with ``ni<digits>``.

Runs made before the namespace wrote the bare names (``bac_clean,none``, ``gsm8k_text_pert``);
:func:`short_metric` and :func:`short_task` read both, so ``report``, ``leaderboard``, ``replay``
and the generation tables read old and new runs alike, through :data:`OLD_NAMES`.

Inside a task config, our own ``dataset_kwargs`` keep the prefix ``lmer_`` (for *lm-eval-robust*:
``lmer_task``, ``lmer_kind``, ``lmer_split``, ``lmer_gen_task``); they live in the config of one
task, not in a shared registry, and committed runs record them, so they keep that name.

This module is the one list: the task YAMLs (:mod:`lm_eval_robust.requests.ni_yamls`), the harness
registration (:mod:`lm_eval_robust.harness.harness_metrics`) and the entry points in pyproject.toml
(``python scripts/gen_harness_names.py``) are generated from it, and
``tests/test_harness_names.py`` checks that they agree. It imports nothing, so any layer may
read it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GEN_KINDS",
    "GEN_TASK_NAMES",
    "METRICS",
    "NAMESPACE",
    "NI_METRICS_CLEAN",
    "NI_METRICS_PERT",
    "OLD_NAMES",
    "ROBUSTNESS_METRICS",
    "Metric",
    "gen_metric_names",
    "gen_task_name",
    "harness",
    "short_metric",
    "short_task",
]

NAMESPACE = "robust_"
AGGREGATION_SUFFIX = "_agg"


@dataclass(frozen=True)
class Metric:
    """One metric: its short name, the module whose function of that name aggregates it, and
    its direction."""

    name: str
    module: str
    higher_is_better: bool = True

    @property
    def harness_name(self) -> str:
        """The name in lm-eval's metric registry, ``metric_list`` and the results JSON."""
        return NAMESPACE + self.name

    @property
    def aggregation_name(self) -> str:
        """The name in lm-eval's aggregation registry."""
        return NAMESPACE + self.name + AGGREGATION_SUFFIX

    @property
    def aggregation_path(self) -> str:
        """Dotted path of the aggregation function (a YAML's ``!function``)."""
        return f"{self.module}.{self.name}"


_CLS = "lm_eval_robust.stats.classification"
_ROB = "lm_eval_robust.stats.robustness"
_CERT = "lm_eval_robust.stats.certify"
_GEN = "lm_eval_robust.tasks.generation.metrics"

#: the clean-side metrics of every classification task
NI_METRICS_CLEAN: tuple[str, ...] = (
    "bac_clean",
    "acc_clean",
    "maj_share_clean",
    "auc_clean",
    "tie_share",
)
#: the leaderboard measures of every perturbed task (lm_eval_robust.stats.robustness)
ROBUSTNESS_METRICS: tuple[str, ...] = (
    "bac_worst",
    "consistency",
    "fmt_best",
    "fmt_worst",
    "fmt_median",
    "fmt_spread",
)
#: every metric of a perturbed classification task, in the YAMLs' order
NI_METRICS_PERT: tuple[str, ...] = (
    "bac_clean",
    "bac_pert",
    "delta_drop",
    "acc_clean",
    "acc_pert",
    "maj_share_clean",
    "maj_share_pert",
    "auc_clean",
    "auc_pert",
    "tie_share",
    *ROBUSTNESS_METRICS,
    "p_cert_h",
    "p_cert_c",
    "p_cert_exact",
    "pop_cert_h",
    "pop_cert_c",
)
_LOWER_IS_BETTER = frozenset({"maj_share_clean", "maj_share_pert", "tie_share", "fmt_spread"})
_CERTIFY = frozenset({"p_cert_h", "p_cert_c", "p_cert_exact", "pop_cert_h", "pop_cert_c"})

#: generation scores per primary metric of a generation task; metrics are ``<score>_<part>``
GEN_SCORES: dict[str, tuple[str, ...]] = {
    "em": ("em",),
    "em_number": ("em",),
    "f1": ("f1", "rouge1", "rouge2", "rougeL"),
}
GEN_PARTS = ("clean", "pert", "drop")


def _ni_module(name: str) -> str:
    return _CERT if name in _CERTIFY else _ROB if name in ROBUSTNESS_METRICS else _CLS


#: all 36 metrics, in the order the registration and the entry points list them
METRICS: tuple[Metric, ...] = (
    *(Metric(n, _ni_module(n), n not in _LOWER_IS_BETTER) for n in NI_METRICS_PERT),
    *(
        Metric(f"{score}_{part}", _GEN)
        for score in ("em", "f1", "rouge1", "rouge2", "rougeL")
        for part in GEN_PARTS
    ),
)
_BY_NAME = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    """The metric of a short name (``KeyError`` for a name that is not ours)."""
    return _BY_NAME[name]


def harness(name: str) -> str:
    """The harness name of a short metric name: ``bac_clean`` -> ``robust_bac_clean``."""
    return _BY_NAME[name].harness_name


def gen_metric_names(primary: str, perturbed: bool) -> tuple[str, ...]:
    """Short metric names of a generation task (clean variants report only ``*_clean``)."""
    parts = GEN_PARTS if perturbed else ("clean",)
    return tuple(f"{s}_{p}" for s in GEN_SCORES[primary] for p in parts)


#: the generation datasets, and each task's kinds as (kind, task-name suffix)
GEN_DATASETS = ("nq_open", "triviaqa", "gsm8k", "xsum")
GEN_KINDS = (("clean", "_clean"), ("text", "_text_pert"))


def gen_task_name(dataset: str, kind: str, split: str = "test") -> str:
    """The harness name of a generation task: ``robust_gsm8k_text_pert[_train]``."""
    suffix = dict(GEN_KINDS)[kind]
    return f"{NAMESPACE}{dataset}{suffix}{'' if split == 'test' else '_' + split}"


GEN_TASK_NAMES: tuple[str, ...] = tuple(
    gen_task_name(d, k, s) for d in GEN_DATASETS for k, _ in GEN_KINDS for s in ("test", "train")
)

#: old name -> current name, for every name runs made before the namespace wrote
OLD_NAMES: dict[str, str] = {
    **{m.name: m.harness_name for m in METRICS},
    **{m.name + "_stderr": m.harness_name + "_stderr" for m in METRICS},
    **{n.removeprefix(NAMESPACE): n for n in GEN_TASK_NAMES},
}
_SHORT = {new: old for old, new in OLD_NAMES.items()}


def short_metric(key: str) -> str:
    """Our short metric name of a results key or metric name, old or new; others unchanged.

    ``"robust_bac_clean,none"``, ``"robust_bac_clean"`` and ``"bac_clean"`` all give
    ``"bac_clean"``; ``"robust_em_drop_stderr,none"`` gives ``"em_drop_stderr"``.
    """
    name = key.split(",", 1)[0]
    return _SHORT.get(name, name)


def short_task(name: str) -> str:
    """A generation task's name without the namespace (``robust_gsm8k_clean`` -> ``gsm8k_clean``),
    the key our tables use for old and new runs alike; any other task name unchanged."""
    return _SHORT.get(name, name)


#: the lines of pyproject.toml between these two are written by scripts/gen_harness_names.py
ENTRY_POINTS_BEGIN = "# BEGIN entry points generated by scripts/gen_harness_names.py; do not edit\n"
ENTRY_POINTS_END = "# END generated entry points\n"


def render_entry_points() -> str:
    """The ``lm_eval.metrics`` and ``lm_eval.aggregations`` entry points, one per metric."""
    target = "lm_eval_robust.harness.harness_metrics"
    metrics = "".join(f'{m.harness_name} = "{target}:{m.harness_name}"\n' for m in METRICS)
    aggs = "".join(f'{m.aggregation_name} = "{target}:{m.aggregation_name}"\n' for m in METRICS)
    return (
        ENTRY_POINTS_BEGIN
        + '[project.entry-points."lm_eval.metrics"]\n'
        + metrics
        + '\n[project.entry-points."lm_eval.aggregations"]\n'
        + aggs
        + ENTRY_POINTS_END
    )
