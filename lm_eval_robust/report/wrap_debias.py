"""Debiasing a wrapped stock task post hoc, where it applies: tasks with one fixed label set.

A wrapped multiple-choice task whose docs all offer the same choices (yes/no, True/False, option
letters, a fixed list of error types) has label log-likelihoods that mean the same thing in every
doc, so the input-independent correction of the method applies to them: ``M*_i = M_i - b_i`` with
``b`` the mean log-probability the model gives each label over the train split's prompts (clean
and perturbed; batch calibration, which reads no gold label). It is fitted on the ``_train``
variant's logged scores and applied to the ``_test`` variant's, with no model run, and the report
gives BAC, δ_drop, worst-case BAC and consistency before and after, with the change's clustered
bootstrap standard error (the same resamples for both, paired by example).

Tasks whose choices differ per doc are refused in one line: their choice slots are not a position
the prompt shows (lm-eval's BIG-bench tasks score each choice as text, shown shuffled or not at
all), so a per-slot offset would learn the dataset's answer order, not a bias of the model. The
feature-based (ridge) correction needs label-token features from ``debiased_hf``'s own tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.report.markdown import markdown_table
from lm_eval_robust.stats.bootstrap import resample_weights
from lm_eval_robust.stats.classification import ll_matrix
from lm_eval_robust.stats.robustness import BOOTSTRAP_STATS, RobustTable, statistics
from lm_eval_robust.values.pairing import TaskRun

__all__ = ["DebiasResult", "batch_offset", "debias_task", "to_markdown"]

SHOWN = ("bac_clean", "bac_pert", "delta_drop", "bac_worst", "consistency", "maj_share_pert")


class DebiasError(UserError):
    """A wrapped task the correction cannot apply to; the message says why."""


def label_set(run: TaskRun) -> str:
    wrapped = run.config.get("wrapped_task") or {}
    return str(wrapped.get("label_set", "?"))


def batch_offset(items: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """``[Q]`` mean log-softmax of each label over the prompts (label-free)."""
    ll = ll_matrix(list(items))
    z = ll - ll.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return np.asarray(logp.mean(axis=0))


def corrected(items: Sequence[Mapping[str, Any]], beta: np.ndarray) -> list[dict[str, Any]]:
    out = []
    for it in items:
        ll = np.asarray(it["ll"], dtype=np.float64) - beta[: len(it["ll"])]
        pred = int(np.argmax(ll))
        out.append({**it, "ll": ll.tolist(), "pred": pred})
    return out


@dataclass(frozen=True)
class DebiasResult:
    task: str
    n_examples: int
    beta: tuple[float, ...]
    before: dict[str, float]
    after: dict[str, float]
    change_se: dict[str, float]


def debias_task(train: TaskRun, test: TaskRun, n_resamples: int = 1000) -> DebiasResult:
    """Fit the label offset on ``train``'s items, apply it to ``test``'s, compare paired."""
    for run in (train, test):
        if label_set(run) != "fixed":
            raise DebiasError(
                f"{run.task}: its choices differ per doc (label_set={label_set(run)}); a label "
                "offset would learn the dataset's answer order, not a model bias: not corrected"
            )
    train_items = train.item_list()
    test_items = test.item_list()
    if {len(i["ll"]) for i in train_items} != {len(i["ll"]) for i in test_items}:
        raise DebiasError(f"{train.task} and {test.task} score different label sets")
    beta = batch_offset(train_items)
    before = RobustTable.from_items(test_items)
    after = RobustTable.from_items(corrected(test_items, beta))
    e = before.n_examples
    one = np.ones((1, e))
    est_b, est_a = statistics(before, one)[0], statistics(after, one)[0]
    diffs = []
    for w in resample_weights(e, n_resamples, np.random.default_rng(0)):
        diffs.append(statistics(after, w) - statistics(before, w))
    d = np.concatenate(diffs)
    se = {}
    for s, name in enumerate(BOOTSTRAP_STATS):
        col = d[:, s][np.isfinite(d[:, s])]
        se[name] = float(np.std(col, ddof=1)) if col.size >= 2 else float("nan")
    pick = {name: BOOTSTRAP_STATS.index(name) for name in SHOWN}
    return DebiasResult(
        task=test.task,
        n_examples=e,
        beta=tuple(float(b) for b in beta),
        before={k: float(est_b[i]) for k, i in pick.items()},
        after={k: float(est_a[i]) for k, i in pick.items()},
        change_se={k: se[k] for k in SHOWN},
    )


def to_markdown(results: Sequence[DebiasResult]) -> str:
    rows = []
    for r in results:
        for k in SHOWN:
            b, a, s = r.before[k], r.after[k], r.change_se[k]
            rows.append(
                [
                    r.task,
                    str(r.n_examples),
                    k,
                    f"{100 * b:.1f}",
                    f"{100 * a:.1f}",
                    f"{100 * (a - b):+.1f} ± {100 * s:.1f}",
                ]
            )
    return markdown_table(
        ["task", "examples", "measure", "before %", "after %", "change ± clustered SE"], rows
    )
