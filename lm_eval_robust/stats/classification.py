"""Harness aggregations over per-doc values: BAC, accuracy, drops, majority-class share, ties.

An exact tie of the top label scores gives each of the k tied labels 1/k of the prediction
(:mod:`lm_eval_robust.values.ties`): BAC and accuracy are then their expected values under a
random tie-break, and ``tie_share`` reports how many docs that concerns.

Each item is the dict ``process_results`` returns (task, example_id, pert_id, gold, pred, ...).
Items may arrive in any order (data parallel gathers them unordered), so each aggregation sorts
and de-duplicates by (task, example_id, pert_id) before computing anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from lm_eval_robust.values.complete import complete_items
from lm_eval_robust.values.ties import credit_from_shares, is_tied, pred_shares


def ll_matrix(rows: list[Mapping[str, Any]]) -> np.ndarray:
    """``[N, Q]`` label scores; docs with fewer choices than ``Q`` are padded with ``-inf``
    (a choice they do not have: never predicted, :func:`pred_shares`)."""
    lls = [list(map(float, r["ll"])) for r in rows]
    q = max((len(v) for v in lls), default=0)
    out = np.full((len(lls), q), -np.inf)
    for i, v in enumerate(lls):
        out[i, : len(v)] = v
    return out


def _rows(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    unique: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for it in items:
        unique[(str(it["task"]), str(it["example_id"]), int(it["pert_id"]))] = it
    return complete_items([unique[k] for k in sorted(unique)])


def _subset(items: Iterable[Mapping[str, Any]], perturbed: bool) -> list[Mapping[str, Any]]:
    """The clean (``pert_id == 0``) or perturbed rows, de-duplicated and ordered."""
    return [r for r in _rows(items) if (int(r["pert_id"]) > 0) == perturbed]


def _arrays(items: Iterable[Mapping[str, Any]], perturbed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Gold labels and prediction shares ``[N, Q]`` (a k-way exact tie gives 1/k to each label).

    Items without ``ll`` (not written by this package) fall back to their ``pred``."""
    rows = _subset(items, perturbed)
    gold = np.array([int(r["gold"]) for r in rows], dtype=np.int64)
    if rows and all(r.get("ll") is not None for r in rows):
        return gold, pred_shares(ll_matrix(rows))
    pred = np.array([int(r["pred"]) for r in rows], dtype=np.int64)
    q = int(max([*gold.tolist(), *pred.tolist(), 0])) + 1
    shares = np.zeros((len(rows), q))
    shares[np.arange(len(rows)), pred] = 1.0
    return gold, shares


def balanced_accuracy(gold: ArrayLike, pred: ArrayLike) -> float:
    """The package's one balanced accuracy: mean recall over the classes present in ``gold``
    (scikit-learn's ``balanced_accuracy_score``); NaN without docs.

    ``pred`` is prediction shares ``[N, Q]`` (:func:`~lm_eval_robust.values.ties.pred_shares`:
    a k-way exact tie of the top scores gives each tied label 1/k, so a doc earns 1/k when its
    gold label is among them) or, where no scores exist, predicted labels ``[N]`` (credit 1 when
    equal). Every other BAC of the package calls this one (:func:`balanced_accuracy_of_credit`)
    or is tested against it (``bac_from_counts``, the constant search's BAC curve)."""
    gold = np.asarray(gold, dtype=np.int64)
    if gold.size == 0:
        return math.nan
    return balanced_accuracy_of_credit(gold, _credit(gold, np.asarray(pred)))


def balanced_accuracy_of_credit(gold: ArrayLike, credit: ArrayLike) -> float:
    """:func:`balanced_accuracy` from each doc's credit ``[N]`` (1 right, 0 wrong, 1/k tied)."""
    gold = np.asarray(gold, dtype=np.int64)
    if gold.size == 0:
        return math.nan
    credit = np.asarray(credit, dtype=np.float64)
    _, cls = np.unique(gold, return_inverse=True)
    total = np.bincount(cls)  # every class of gold, in sorted order, has docs
    correct = np.bincount(cls, weights=credit, minlength=total.size)
    return float(np.mean(correct / total))


def _credit(gold: np.ndarray, pred: np.ndarray) -> np.ndarray:
    pred = np.asarray(pred)
    if pred.ndim == 1:
        return (pred == gold).astype(np.float64)
    return credit_from_shares(pred, gold)


def majority_share(pred: np.ndarray) -> float:
    """Share of predictions taken by the most frequent predicted class (shares count 1/k)."""
    pred = np.asarray(pred)
    if pred.shape[0] == 0:
        return math.nan
    if pred.ndim == 1:
        return float(np.bincount(pred).max() / pred.size)
    return float(pred.sum(axis=0).max() / pred.shape[0])


def bac_clean(items: Iterable[Mapping[str, Any]]) -> float:
    return balanced_accuracy(*_arrays(list(items), perturbed=False))


def bac_pert(items: Iterable[Mapping[str, Any]]) -> float:
    return balanced_accuracy(*_arrays(list(items), perturbed=True))


def delta_drop(items: Iterable[Mapping[str, Any]]) -> float:
    """BAC on perturbed prompts minus BAC on clean prompts (negative = a drop, as the paper)."""
    items = list(items)
    return bac_pert(items) - bac_clean(items)


def _acc(gold: np.ndarray, pred: np.ndarray) -> float:
    return float(_credit(gold, pred).mean()) if gold.size else math.nan


def acc_clean(items: Iterable[Mapping[str, Any]]) -> float:
    return _acc(*_arrays(list(items), perturbed=False))


def acc_pert(items: Iterable[Mapping[str, Any]]) -> float:
    return _acc(*_arrays(list(items), perturbed=True))


def maj_share_clean(items: Iterable[Mapping[str, Any]]) -> float:
    return majority_share(_arrays(list(items), perturbed=False)[1])


def maj_share_pert(items: Iterable[Mapping[str, Any]]) -> float:
    return majority_share(_arrays(list(items), perturbed=True)[1])


def tie_share(items: Iterable[Mapping[str, Any]]) -> float:
    """Share of docs (clean and perturbed) whose top label score is tied exactly."""
    rows = [r for r in _rows(items) if r.get("ll") is not None]
    if not rows:
        return math.nan
    return float(is_tied(ll_matrix(rows)).mean())


def _scores(items: Iterable[Mapping[str, Any]], perturbed: bool) -> tuple[np.ndarray, np.ndarray]:
    rows = _subset(items, perturbed)
    gold = np.array([int(r["gold"]) for r in rows], dtype=np.int64)
    return gold, ll_matrix(rows)


def margin_auc(gold: np.ndarray, ll: np.ndarray) -> float:
    """Threshold-free score of the label-logit margin.

    Binary: ROC AUC of ``ll[1] - ll[0]`` for class 1. More classes: macro one-vs-rest AUC of the
    softmax over the label log-likelihoods. NaN when fewer than two classes are present.
    """
    if gold.size == 0 or len(np.unique(gold)) < 2:
        return math.nan
    from sklearn.metrics import roc_auc_score

    if ll.shape[1] == 2:
        return float(roc_auc_score(gold, ll[:, 1] - ll[:, 0]))
    z = ll - ll.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    present = np.unique(gold)
    aucs = [roc_auc_score(gold == k, p[:, k]) for k in present if k < p.shape[1]]
    return float(np.mean(aucs))


def auc_clean(items: Iterable[Mapping[str, Any]]) -> float:
    return margin_auc(*_scores(list(items), perturbed=False))


def auc_pert(items: Iterable[Mapping[str, Any]]) -> float:
    return margin_auc(*_scores(list(items), perturbed=True))
