"""How exact ties between label scores count.

A prediction is the label with the largest log-likelihood. When ``k`` labels share that largest
value exactly, no label is preferred: each gets ``1/k`` of the prediction, so a doc whose gold label
is among them earns ``1/k`` credit. This is the expected score of a uniformly random tie-break, so
BAC, accuracy and every paired metric are their expectations under such a tie-break, and no label
wins ties by its position in the list. Ties are exact equalities of the recorded values; with
float32 label scores (``debiased_hf``) they are rare, and every task reports their share.
"""

from __future__ import annotations

import numpy as np

__all__ = ["credit_from_shares", "is_tied", "pred_shares", "tie_credit"]


def pred_shares(ll: np.ndarray) -> np.ndarray:
    """``[N, Q]``: ``1/k`` on each of the ``k`` labels that share the row's maximum, else 0.

    Rows with a NaN, +inf or no finite value give no prediction (all zeros). ``-inf`` marks a
    label the doc does not have (rows of docs with fewer choices, padded to ``Q``)."""
    ll = np.asarray(ll, dtype=np.float64)
    if ll.ndim != 2 or ll.shape[0] == 0:
        return np.zeros((ll.shape[0] if ll.ndim else 0, ll.shape[-1] if ll.ndim == 2 else 0))
    ok = ~(np.isnan(ll) | (ll == np.inf)).any(axis=1) & np.isfinite(ll).any(axis=1)
    top = np.where(ok[:, None], ll, -np.inf).max(axis=1, keepdims=True)
    hit = (ll == top) & ok[:, None]
    k = hit.sum(axis=1, keepdims=True)
    return np.where(hit, 1.0 / np.maximum(k, 1), 0.0)


def credit_from_shares(shares: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """``[N]`` the share each doc's prediction gives its gold label (0 for a gold outside)."""
    g = np.asarray(gold, dtype=np.int64)
    out = np.zeros(g.shape[0])
    if shares.size == 0:
        return out
    inside = (g >= 0) & (g < shares.shape[1])
    out[inside] = shares[np.flatnonzero(inside), g[inside]]
    return out


def tie_credit(ll: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """``[N]`` credit of each doc: ``1/k`` when the gold label is among ``k`` tied maxima."""
    return credit_from_shares(pred_shares(ll), gold)


def is_tied(ll: np.ndarray) -> np.ndarray:
    """``[N]`` True where two or more labels share the row's maximum exactly."""
    shares = pred_shares(ll)
    return (shares > 0).sum(axis=1) > 1 if shares.size else np.zeros(shares.shape[0], bool)
