"""Finite-sample per-example certificates: an exact binomial bound on accuracy under perturbation.

An example's *accuracy under perturbation* is ``a = P(a random variant of it is answered
right)``. The certificate promises ``a >= 1 - phi``. It is decided from ``n`` variants drawn for
the example (its estimation half), as randomized smoothing certifies a prediction:

* ``s`` of the ``n`` variants are answered right (a variant whose top label scores tie counts as
  wrong, so ties can only withhold a certificate);
* the exact binomial p-value of the null ``a < 1 - phi`` is ``P(Bin(n, 1 - phi) >= s)``; it is
  at most ``alpha`` exactly when the one-sided Clopper–Pearson lower bound of ``a`` at level
  ``1 - alpha`` is at least ``1 - phi``;
* ``control="each"`` certifies every example whose p-value is at most ``alpha``: an example
  with ``a < 1 - phi`` is certified with probability at most ``alpha``;
* ``control="share"`` (default) applies Benjamini–Hochberg at level ``alpha`` across the task's
  examples (their variants are drawn independently): the expected share of certified examples
  whose accuracy is below ``1 - phi`` is at most ``alpha``, and each certificate also passes
  the per-example test, so it keeps the ``"each"`` promise too.

Nothing is assumed about the model or the perturbation distribution beyond independent draws of
an example's variants, and the promise holds at every ``n``. An example can be certified only if
``(1 - phi)^n <= alpha`` (all ``n`` variants right), i.e. from :func:`min_variants` estimation
variants, which is ``K >= 2 n - 1`` perturbations per example when half of them are held back
(:func:`min_k`); below that the rate is not a number but n/a (``phi = 0.1``, ``alpha = 0.05``:
29 variants, K >= 57).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import beta, binom

__all__ = [
    "Control",
    "ExactConfig",
    "benjamini_hochberg",
    "binomial_pvalues",
    "certify_counts",
    "clopper_pearson_lower",
    "min_k",
    "min_variants",
]

Control = Literal["share", "each"]


@dataclass(frozen=True)
class ExactConfig:
    """``phi``: the failure ratio the certificate bounds; ``alpha``: the chance (``"each"``) or
    expected share (``"share"``) of certificates that are wrong."""

    phi: float = 0.1
    alpha: float = 0.05
    control: Control = "share"

    def __post_init__(self) -> None:
        if not 0.0 < self.phi < 1.0:
            raise ValueError(f"phi must be in (0, 1); got {self.phi}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1); got {self.alpha}")
        if self.control not in ("share", "each"):
            raise ValueError(f"control must be 'share' or 'each'; got {self.control!r}")

    @property
    def min_variants(self) -> int:
        return min_variants(self.phi, self.alpha)

    @property
    def min_k(self) -> int:
        return min_k(self.phi, self.alpha)


def min_variants(phi: float, alpha: float) -> int:
    """The smallest ``n`` with ``(1 - phi)^n <= alpha``: fewer variants certify nothing."""
    n = max(1, math.ceil(math.log(alpha) / math.log1p(-phi)))
    while (1.0 - phi) ** n > alpha:
        n += 1
    while n > 1 and (1.0 - phi) ** (n - 1) <= alpha:
        n -= 1
    return n


def min_k(phi: float, alpha: float) -> int:
    """The smallest K (perturbations per example) whose estimation half, ``ceil(K/2)``
    variants, reaches :func:`min_variants`."""
    return 2 * min_variants(phi, alpha) - 1


def binomial_pvalues(successes: np.ndarray, n: np.ndarray, phi: float) -> np.ndarray:
    """``P(Bin(n, 1 - phi) >= s)`` per example: the exact p-value of ``a < 1 - phi``; 1 where
    ``n == 0``."""
    s = np.asarray(successes, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    if np.any(s < 0) or np.any(s > n):
        raise ValueError("successes must lie in [0, n]")
    p = binom.sf(s - 1, n, 1.0 - phi)
    return np.where(n > 0, np.minimum(p, 1.0), 1.0)


def clopper_pearson_lower(successes: np.ndarray, n: np.ndarray, alpha: float) -> np.ndarray:
    """One-sided ``1 - alpha`` Clopper–Pearson lower bound of a binomial proportion (0 for
    ``s == 0``, NaN for ``n == 0``)."""
    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        low = beta.ppf(alpha, np.maximum(s, 1e-300), n - s + 1.0)
    return np.where(n > 0, np.where(s > 0, low, 0.0), np.nan)


def benjamini_hochberg(pvalues: np.ndarray, level: float) -> np.ndarray:
    """Rejections of the Benjamini–Hochberg step-up rule at ``level`` (bool, same order)."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    if m == 0:
        return np.zeros(0, dtype=bool)
    order = np.argsort(p, kind="stable")
    below = p[order] <= level * np.arange(1, m + 1) / m
    out = np.zeros(m, dtype=bool)
    if below.any():
        out[order[: int(np.flatnonzero(below).max()) + 1]] = True
    return out


def certify_counts(
    successes: np.ndarray, n: np.ndarray, config: ExactConfig = ExactConfig()
) -> np.ndarray:
    """``[E]`` certified examples from ``s`` right answers out of ``n`` variants each."""
    p = binomial_pvalues(successes, n, config.phi)
    each = p <= config.alpha
    if config.control == "each":
        return each
    return benjamini_hochberg(p, config.alpha) & each
