"""Clean-calibrated reference: the label-logit offset that maximises clean train BAC.

A small model is often "at chance" only because its decision threshold is misplaced: one label
takes nearly every prediction while the label-logit margin still ranks the examples. Subtracting
the offset ``β`` that maximises balanced accuracy on the *clean* train prompts gives a reference
model whose threshold is not simply misplaced; its perturbation drop is the one to read a
debiasing method against. The offset uses no perturbed prompt, so any recovery it shows is
calibration, not robustness.

Binary tasks: an exhaustive search over the thresholds between consecutive train margins.
More labels: coordinate ascent over ``β_1 .. β_{d-1}`` (``β_0 = 0``), each step an exhaustive
search over the points where one label's predictions change, until no step improves BAC.
Ties keep the offset of smallest magnitude (no change when nothing helps).
"""

from __future__ import annotations

import numpy as np

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.stats.classification import balanced_accuracy
from lm_eval_robust.values.ties import pred_shares


def _bac_of(logits: np.ndarray, gold: np.ndarray, beta: np.ndarray) -> float:
    """BAC of ``logits − β`` (exact ties of the top scores give 1/k credit)."""
    return balanced_accuracy(gold, pred_shares(logits - beta))


def _candidates(values: np.ndarray) -> np.ndarray:
    """Midpoints between the distinct sorted ``values``, one point beyond each end, and 0."""
    v = np.unique(values[np.isfinite(values)])
    if v.size == 0:
        return np.zeros(1)
    mids = (v[1:] + v[:-1]) / 2.0
    return np.concatenate([[v[0] - 1.0], mids, [v[-1] + 1.0], [0.0]])


def _best_coordinate(logits: np.ndarray, gold: np.ndarray, beta: np.ndarray, k: int) -> float:
    """The ``β_k`` maximising BAC with the other offsets fixed (smallest |β_k| among ties)."""
    others = np.delete(logits - beta, k, axis=1).max(axis=1)
    # label k wins a row exactly when logits[:, k] - β_k > others
    grid = _candidates(logits[:, k] - others)
    best, best_val = -np.inf, 0.0
    for b in sorted(grid, key=abs):
        trial = beta.copy()
        trial[k] = b
        score = _bac_of(logits, gold, trial)
        if score > best + 1e-12:
            best, best_val = score, float(b)
    return best_val


def clean_offset(logits: np.ndarray, gold: np.ndarray, max_sweeps: int = 20) -> np.ndarray:
    """Offset ``β`` [d] (``β_0 = 0``) maximising BAC of ``argmax(logits - β)`` on these rows."""
    lg = np.asarray(logits, dtype=np.float64)
    y = np.asarray(gold, dtype=np.int64)
    if lg.ndim != 2 or lg.shape[1] < 2 or lg.shape[0] != y.shape[0]:
        raise UserError(
            f"clean calibration needs label logits [rows, labels >= 2] and one gold label per "
            f"row; got logits {lg.shape} and gold {y.shape}"
        )
    if lg.shape[0] == 0:
        raise UserError("clean calibration needs clean train rows; collect features on _train")
    if not np.isfinite(lg).all():
        raise UserError("clean calibration: label logits contain NaN or inf; recollect features")
    d = lg.shape[1]
    beta = np.zeros(d)
    score = _bac_of(lg, y, beta)
    for _ in range(max_sweeps):
        improved = False
        for k in range(1, d):
            trial = beta.copy()
            trial[k] = _best_coordinate(lg, y, beta, k)
            new = _bac_of(lg, y, trial)
            if new > score + 1e-12:
                beta, score, improved = trial, new, True
        if not improved:
            break
    return beta
