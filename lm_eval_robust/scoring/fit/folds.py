"""Grouped K-fold assignment: every row of one example lands in the same fold.

Shared by every cross-validation of the fit (ridge ``λ``/``α``, the automatic choice of the
correction kind, the generation fits). Pure numpy.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from lm_eval_robust.base.defaults import DEFAULT_FOLDS
from lm_eval_robust.scoring.fit.ridge import FitError

__all__ = ["fold_of_unique", "grouped_folds"]


def grouped_folds(
    example_ids: ArrayLike, n_folds: int = DEFAULT_FOLDS, seed: int = 0
) -> np.ndarray:
    """Fold index per row; every row of one example id lands in the same fold.

    The distinct ids are sorted, permuted with ``numpy.random.default_rng(seed)`` and dealt into
    ``min(n_folds, #ids)`` near-equal groups, so the assignment depends only on the set of ids.
    """
    ids = np.asarray(example_ids)
    uniq, inverse = np.unique(ids, return_inverse=True)
    fold_of_uniq = fold_of_unique(len(uniq), n_folds, seed)
    return fold_of_uniq[inverse.reshape(-1)]


def fold_of_unique(n_unique: int, n_folds: int, seed: int) -> np.ndarray:
    """Fold index of each of ``n_unique`` sorted distinct ids (see :func:`grouped_folds`)."""
    if n_folds < 2:
        raise FitError(f"n_folds must be at least 2; got {n_folds}")
    if n_unique < 2:
        raise FitError(f"cross-validation needs at least 2 distinct examples; got {n_unique}")
    k = min(n_folds, n_unique)
    perm = np.random.default_rng(seed).permutation(n_unique)
    fold = np.empty(n_unique, dtype=np.int64)
    for i, part in enumerate(np.array_split(perm, k)):
        fold[part] = i
    return fold
