"""Exact paired tests for a change of per-example outcomes (generation claims).

A drop or a repair on generation tasks is a change of per-example scores between two
conditions scored on the same examples (clean vs perturbed, base vs corrected). A BCa endpoint
that excludes zero is not a test at small counts; these are:

* :func:`mcnemar_exact`: binary outcomes (exact match). Only discordant examples carry
  information: ``b`` right -> wrong, ``c`` wrong -> right; under no change each discordant
  example goes either way with probability 1/2, and the two-sided p-value is
  ``min(1, 2 P(Bin(b + c, 1/2) <= min(b, c)))``.
* :func:`paired_permutation`: any per-example score (F1, ROUGE): the sign of each example's
  difference is flipped at random under no change; exact over all ``2^n`` sign patterns of the
  non-zero differences when ``n <= 20``, else ``n_draws`` random patterns (seeded). Two-sided,
  on the mean difference.

A claim is "distinguishable from zero" only when the test's p-value is below the level.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

__all__ = ["PairedTest", "exact_paired", "mcnemar_exact", "paired_permutation"]


@dataclass(frozen=True)
class PairedTest:
    test: str
    n: int  # examples compared
    n_discordant: int  # examples whose outcome changed
    b: int  # became worse (right -> wrong, or a negative difference)
    c: int  # became better
    mean_diff: float  # after minus before
    p: float

    def distinguishable(self, level: float = 0.05) -> bool:
        return math.isfinite(self.p) and self.p < level


def mcnemar_exact(before: np.ndarray, after: np.ndarray) -> PairedTest:
    """Exact McNemar test of two binary outcome vectors on the same examples."""
    x = np.asarray(before, dtype=bool)
    y = np.asarray(after, dtype=bool)
    if x.shape != y.shape:
        raise ValueError(f"outcomes of different lengths: {x.shape} vs {y.shape}")
    b = int((x & ~y).sum())
    c = int((~x & y).sum())
    n = b + c
    p = 1.0 if n == 0 else float(min(1.0, 2.0 * binom.cdf(min(b, c), n, 0.5)))
    mean = float(y.mean() - x.mean()) if x.size else math.nan
    return PairedTest("exact McNemar", int(x.size), n, b, c, mean, p)


def paired_permutation(
    before: np.ndarray, after: np.ndarray, n_draws: int = 100_000, seed: int = 0
) -> PairedTest:
    """Two-sided sign-flip permutation test of the mean paired difference."""
    x = np.asarray(before, dtype=np.float64)
    y = np.asarray(after, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"scores of different lengths: {x.shape} vs {y.shape}")
    d = y - x
    nz = d[np.abs(d) > 1e-12]
    obs = abs(float(nz.sum()))
    n = nz.size
    if n == 0:
        p = 1.0
    elif n <= 20:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        sums = np.abs(signs @ nz)
        p = float((sums >= obs - 1e-9).mean())
    else:
        rng = np.random.default_rng(seed)
        signs = rng.choice((-1.0, 1.0), size=(n_draws, n))
        sums = np.abs(signs @ nz)
        p = float((1 + (sums >= obs - 1e-9).sum()) / (1 + n_draws))
    return PairedTest(
        "paired sign-flip permutation",
        int(d.size),
        int(n),
        int((nz < 0).sum()),
        int((nz > 0).sum()),
        float(d.mean()) if d.size else math.nan,
        p,
    )


def exact_paired(before: np.ndarray, after: np.ndarray, seed: int = 0) -> PairedTest:
    """Exact McNemar where every score is binary (0 or the same maximum, e.g. EM in percent),
    else the sign-flip permutation test."""
    x = np.asarray(before, dtype=np.float64)
    y = np.asarray(after, dtype=np.float64)
    both = np.concatenate([x, y])
    top = float(both.max()) if both.size else 1.0
    if top > 0 and np.all((both == 0) | (both == top)):
        return mcnemar_exact(x == top, y == top)
    return paired_permutation(x, y, seed=seed)
