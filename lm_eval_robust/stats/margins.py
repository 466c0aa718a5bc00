"""One task's label log-likelihoods grouped by source example (:class:`MarginTable`), the
pairwise margins and the split of each example's variants into estimation and verification halves.

Margins and shifts
------------------
For an example with gold label ``y`` and competitor ``j != y`` the pairwise margin is
``rho_j = ll[y] - ll[j]``, the difference of the label log-likelihoods. All labels share the
softmax normaliser, so this equals the label-logit difference ``M_y - M_j``: the paper's
``<w_y - w_j, x>`` without the division by ``||w_y - w_j||``. Every quantity the certificate
compares (``rho``, ``mu``, ``c``, ``sqrt(nu)``) scales with the same factor, so the certificate
is invariant to that normalisation and the raw differences are used. The shift of variant ``k``
is ``Z_j = rho_j(variant k) - rho_j(clean)``; the variant is misclassified against ``j`` iff
``rho_j + Z_j <= 0``.

Estimation / verification split (App. F.2)
------------------------------------------
An example's variants are split 50/50: variant ``(example_id, pert_id)`` gets the key
``blake2b(seed, example_id, pert_id)``; the ``ceil(K/2)`` variants with the smallest keys form
the estimation half, the rest the verification half. The rule is deterministic, independent of
doc order, and a variant's key does not depend on the other variants.

The certificates built on them are :mod:`lm_eval_robust.stats.certificates`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lm_eval_robust.values.complete import complete_items
from lm_eval_robust.values.ties import is_tied, tie_credit

__all__ = ["MarginTable", "estimation_mask", "label_counts", "pairwise_margins"]


def label_counts(items: Iterable[Mapping[str, Any]]) -> list[int]:
    """The distinct numbers of labels (``len(ll)``) of the items with label scores, sorted. More
    than one (BIG-bench's date_understanding: 5 or 6 choices) means no one label set: no margin
    table (:meth:`MarginTable.from_items` refuses them), so no certificate and no BAC plan."""
    return sorted({len(it["ll"]) for it in items if it.get("ll") is not None})


def chance_share(items: Iterable[Mapping[str, Any]]) -> float:
    """What a uniform random pick scores: the mean of 1 / (number of labels) over the clean items
    with label scores (its accuracy; its BAC too where every doc has the same labels). NaN when no
    clean item has label scores."""
    shares = [
        1.0 / len(it["ll"])
        for it in items
        if it.get("ll") is not None and len(it["ll"]) and int(it.get("pert_id", 0)) == 0
    ]
    return sum(shares) / len(shares) if shares else float("nan")


@dataclass(frozen=True, eq=False)
class MarginTable:
    """One task's label log-likelihoods grouped by source example.

    ``example_ids [E]`` (sorted), ``gold [E]``, ``clean_ll [E, Q]`` (NaN rows where the clean doc
    is missing; ``has_clean [E]``), and per variant ``var_example [R]`` (index into the examples),
    ``var_pert_id [R]`` (>= 1), ``var_ll [R, Q]``. Variants are sorted by (example, pert_id).
    """

    example_ids: np.ndarray
    gold: np.ndarray
    clean_ll: np.ndarray
    has_clean: np.ndarray
    var_example: np.ndarray
    var_pert_id: np.ndarray
    var_ll: np.ndarray

    @property
    def n_examples(self) -> int:
        return int(self.example_ids.shape[0])

    @property
    def n_classes(self) -> int:
        return int(self.clean_ll.shape[1])

    @property
    def var_gold(self) -> np.ndarray:
        return self.gold[self.var_example]

    @property
    def var_pred(self) -> np.ndarray:
        """Predicted label of each variant (first maximum, as ``process_results``)."""
        return np.argmax(self.var_ll, axis=1) if self.var_ll.size else np.zeros(0, np.int64)

    @property
    def clean_pred(self) -> np.ndarray:
        """Predicted label of each clean prompt (-1 where the clean doc is missing)."""
        filled = np.where(self.has_clean[:, None], self.clean_ll, 0.0)
        return np.where(self.has_clean, np.argmax(filled, axis=1), -1)

    def variant_counts(self) -> np.ndarray:
        return np.bincount(self.var_example, minlength=self.n_examples)

    def gold_onehot(self) -> np.ndarray:
        """``[E, Q]`` one-hot of each example's gold label (float)."""
        onehot = np.zeros((self.n_examples, self.n_classes))
        onehot[np.arange(self.n_examples), np.clip(self.gold, 0, self.n_classes - 1)] = 1.0
        return onehot

    def clean_correct(self) -> np.ndarray:
        """``[E]`` credit of each clean prompt: 1 if answered right, 1/k if the gold label is
        among k exactly tied top labels, 0 otherwise or where the clean doc is missing."""
        filled = np.where(self.has_clean[:, None], self.clean_ll, np.nan)
        return np.where(self.has_clean, tie_credit(filled, self.gold), 0.0)

    def var_correct(self) -> np.ndarray:
        """``[R]`` credit of each perturbed variant (1/k for a k-way tie including gold)."""
        return tie_credit(self.var_ll, self.var_gold)

    def clean_tied(self) -> np.ndarray:
        """``[E]`` True where the clean prompt's top label scores tie exactly."""
        filled = np.where(self.has_clean[:, None], self.clean_ll, np.nan)
        return is_tied(filled) & self.has_clean

    def var_tied(self) -> np.ndarray:
        """``[R]`` True where the variant's top label scores tie exactly."""
        return is_tied(self.var_ll)

    @classmethod
    def from_items(cls, items: Iterable[Mapping[str, Any]]) -> MarginTable:
        """Build from per-doc dicts (``example_id``, ``pert_id``, ``gold``, ``ll``), any order;
        duplicates of (task, example_id, pert_id) are kept once (the last one)."""
        unique: dict[tuple[str, str, int], Mapping[str, Any]] = {}
        for it in complete_items(items):
            unique[(str(it.get("task", "")), str(it["example_id"]), int(it["pert_id"]))] = it
        tasks = {k[0] for k in unique}
        if len(tasks) > 1:
            raise ValueError(f"items of several tasks {sorted(tasks)}; certify one task at a time")
        keys = sorted(unique, key=lambda k: (k[1], k[2]))
        ids = sorted({k[1] for k in keys})
        index = {e: i for i, e in enumerate(ids)}
        q = label_counts(unique[k] for k in keys)
        if len(q) > 1:
            raise ValueError(f"docs have different numbers of labels: {q}")
        n_q = q[0] if q else 0
        gold = np.full(len(ids), -1, dtype=np.int64)
        clean = np.full((len(ids), n_q), np.nan)
        has_clean = np.zeros(len(ids), dtype=bool)
        var_ex: list[int] = []
        var_pid: list[int] = []
        var_ll: list[list[float]] = []
        for k in keys:
            it = unique[k]
            e = index[k[1]]
            g = int(it["gold"])
            if gold[e] >= 0 and gold[e] != g:
                raise ValueError(f"example {k[1]!r} has docs with different gold labels")
            gold[e] = g
            ll = [float(v) for v in it["ll"]]
            if k[2] == 0:
                clean[e] = ll
                has_clean[e] = True
            else:
                var_ex.append(e)
                var_pid.append(k[2])
                var_ll.append(ll)
        return cls(
            example_ids=np.array(ids, dtype=object),
            gold=gold,
            clean_ll=clean,
            has_clean=has_clean,
            var_example=np.array(var_ex, dtype=np.int64),
            var_pert_id=np.array(var_pid, dtype=np.int64),
            var_ll=np.array(var_ll, dtype=np.float64).reshape(len(var_ll), n_q),
        )


def pairwise_margins(ll: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """``[N, Q-1]`` margins ``ll[y] - ll[j]`` for the competitors ``j != y`` in increasing order."""
    ll = np.asarray(ll, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    q = ll.shape[1]
    comp = np.arange(q - 1)[None, :] + (np.arange(q - 1)[None, :] >= gold[:, None])
    own = np.take_along_axis(ll, gold[:, None], axis=1)
    return own - np.take_along_axis(ll, comp, axis=1)


def _variant_key(seed: int, example_id: str, pert_id: int) -> int:
    digest = hashlib.blake2b(f"{seed}\x1f{example_id}\x1f{pert_id}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little")


def estimation_mask(table: MarginTable, seed: int = 0) -> np.ndarray:
    """``[R]`` True for the variants of the estimation half (see the module docstring)."""
    r = table.var_example.shape[0]
    if r == 0:
        return np.zeros(0, dtype=bool)
    keys = np.array(
        [
            _variant_key(seed, str(table.example_ids[e]), int(p))
            for e, p in zip(table.var_example, table.var_pert_id, strict=True)
        ],
        dtype=np.uint64,
    )
    order = np.lexsort((keys, table.var_example))
    counts = table.variant_counts()
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ex_sorted = table.var_example[order]
    rank = np.arange(r) - starts[ex_sorted]
    mask = np.zeros(r, dtype=bool)
    mask[order] = rank < (counts[ex_sorted] + 1) // 2
    return mask
