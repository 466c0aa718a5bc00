"""Per-neuron robustness radii from per-example perturbation statistics (paper Section 3, App. B).

For label neuron ``i`` and example ``x`` with perturbed variants ``x̂_j``,
``f_ji = M_i(x̂_j) − M_i(x)``. Over the ``m`` examples:

* ``C_i = max_x |mean_j f_ji|``  (perturbation-induced bias bound),
* ``V_i = max_x var_j f_ji``     (variance bound),
* ``ε_V(φ) = C_i + sqrt(V_i·m/φ)``                     (Chebyshev, eq. robustness_bias_v),
* ``ε_L(φ) = C_i + c·γ_i·sqrt(2n·ln(2m/φ))``          (McDiarmid, eq. robustness_bias),

with ``γ_i`` the Lipschitz constant of ``M_i`` (for a logit, the L2 norm of its LM-head row) and
``c`` the coordinate-wise perturbation bound of the features. After debiasing, pass
``f* = f − b(x̂)`` to get the corrected radii; :func:`compare_radii` gives the paper's
``p_ε = mean_i 100·(ε_i − ε*_i)/ε_i``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from lm_eval_robust.base.defaults import DEFAULT_RADII_PHI

__all__ = [
    "ExampleStats",
    "PerturbationBound",
    "Radii",
    "RadiiChange",
    "compare_radii",
    "eps_lipschitz",
    "eps_variance",
    "example_stats",
    "head_row_norms",
    "percentage_decrease",
    "perturbation_bound",
    "robustness_radii",
]


@dataclass(eq=False)
class ExampleStats:
    """Per-example mean and variance of f over the example's perturbations.

    ``example_ids [E]`` (sorted distinct ids), ``counts [E]``, ``mean [E, d]``, ``var [E, d]``.
    """

    example_ids: np.ndarray
    counts: np.ndarray
    mean: np.ndarray
    var: np.ndarray


def example_stats(f: ArrayLike, example_ids: ArrayLike, ddof: int = 0) -> ExampleStats:
    """Group rows of ``f [rows, d]`` by ``example_ids [rows]``; mean and variance (``ddof``) per
    example. With ``ddof=1`` an example with one row has variance NaN (ignored by the maxima)."""
    fa = np.asarray(f, dtype=np.float64)
    if fa.ndim == 1:
        fa = fa[:, None]
    if fa.ndim != 2:
        raise ValueError(f"f must be [rows, d]; got shape {fa.shape}")
    ids = np.asarray(example_ids).reshape(-1)
    if ids.shape[0] != fa.shape[0]:
        raise ValueError(f"example_ids has {ids.shape[0]} rows; f has {fa.shape[0]}")
    if fa.shape[0] == 0:
        raise ValueError("f has no rows")
    if not np.isfinite(fa).all():
        bad = int((~np.isfinite(fa)).any(axis=1).sum())
        raise ValueError(f"f contains NaN/inf in {bad} rows (of {fa.shape[0]})")
    uniq, inv = np.unique(ids, return_inverse=True)
    inv = inv.reshape(-1)
    e, d = len(uniq), fa.shape[1]
    counts = np.bincount(inv, minlength=e)
    sums = np.zeros((e, d))
    np.add.at(sums, inv, fa)
    mean = sums / counts[:, None]
    sq = np.zeros((e, d))
    np.add.at(sq, inv, (fa - mean[inv]) ** 2)
    denom = (counts - ddof).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.where(denom[:, None] > 0, sq / np.maximum(denom, 1)[:, None], np.nan)
    return ExampleStats(example_ids=uniq, counts=counts, mean=mean, var=var)


def eps_variance(C: ArrayLike, V: ArrayLike, m: int, phi: float) -> np.ndarray:
    """``ε_V(φ) = C + sqrt(V·m/φ)`` (element-wise)."""
    _check_m_phi(m, phi)
    return np.asarray(C, np.float64) + np.sqrt(np.asarray(V, np.float64) * m / phi)


def eps_lipschitz(
    C: ArrayLike, gamma: ArrayLike, c: float, n: int, m: int, phi: float
) -> np.ndarray:
    """``ε_L(φ) = C + c·γ·sqrt(2n·ln(2m/φ))`` (element-wise)."""
    _check_m_phi(m, phi)
    if n < 1:
        raise ValueError(f"n (feature dimension) must be positive; got {n}")
    if c < 0:
        raise ValueError(f"c must be >= 0; got {c}")
    return np.asarray(C, np.float64) + c * np.asarray(gamma, np.float64) * math.sqrt(
        2.0 * n * math.log(2.0 * m / phi)
    )


def _check_m_phi(m: int, phi: float) -> None:
    if m < 1:
        raise ValueError(f"m (number of examples) must be positive; got {m}")
    if not 0.0 < phi <= 1.0:
        raise ValueError(f"phi must be in (0, 1]; got {phi}")


@dataclass(eq=False)
class Radii:
    """Per-neuron bounds and radii. ``eps_L``/``gamma``/``c``/``n`` are None when not computed."""

    C: np.ndarray
    V: np.ndarray
    m: int
    phi: float
    eps_V: np.ndarray
    eps_L: np.ndarray | None = None
    gamma: np.ndarray | None = None
    c: float | None = None
    n: int | None = None


def robustness_radii(
    f: ArrayLike,
    example_ids: ArrayLike,
    *,
    phi: float = DEFAULT_RADII_PHI,
    m: int | None = None,
    gamma: ArrayLike | None = None,
    c: float | None = None,
    n: int | None = None,
    ddof: int = 0,
) -> Radii:
    """``C_i``, ``V_i``, ``ε_V`` and (given ``gamma``, ``c``, ``n``) ``ε_L`` from ``f [rows, d]``.

    ``m`` defaults to the number of distinct examples in ``example_ids`` (the paper's ``|S|``);
    pass it to certify a set of another size. Variances use ``ddof`` (0: plug-in, the default).
    """
    st = example_stats(f, example_ids, ddof=ddof)
    C = np.max(np.abs(st.mean), axis=0)
    V = np.nanmax(st.var, axis=0) if np.isfinite(st.var).any() else np.full(C.shape, np.nan)
    mm = int(m) if m is not None else len(st.example_ids)
    out = Radii(C=C, V=V, m=mm, phi=float(phi), eps_V=eps_variance(C, V, mm, phi))
    given = [gamma is not None, c is not None, n is not None]
    if any(given) and not all(given):
        raise ValueError("eps_L needs all of gamma, c and n")
    if gamma is not None and c is not None and n is not None:
        g = np.broadcast_to(np.asarray(gamma, np.float64), C.shape).copy()
        out.eps_L = eps_lipschitz(C, g, float(c), int(n), mm, phi)
        out.gamma, out.c, out.n = g, float(c), int(n)
    return out


def percentage_decrease(before: ArrayLike, after: ArrayLike) -> float:
    """``p_ε = mean_i 100·(before_i − after_i)/before_i``; neurons with ``before_i = 0`` are left
    out (NaN if none is left). Negative values mean the radii expanded."""
    b = np.asarray(before, np.float64).reshape(-1)
    a = np.asarray(after, np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"before {b.shape} and after {a.shape} differ in shape")
    ok = b != 0
    if not ok.any():
        return math.nan
    return float(np.mean(100.0 * (b[ok] - a[ok]) / b[ok]))


@dataclass(eq=False)
class RadiiChange:
    """``p_eps_V`` / ``p_eps_L`` (mean over neurons) and the per-neuron percentages."""

    p_eps_V: float
    p_eps_L: float | None
    per_neuron_V: np.ndarray
    per_neuron_L: np.ndarray | None


def compare_radii(before: Radii, after: Radii) -> RadiiChange:
    """Percentage decrease of each radius from ``before`` (no debiasing) to ``after``."""

    def per(b: np.ndarray, a: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(b != 0, 100.0 * (b - a) / b, np.nan)

    pl: float | None = None
    per_l: np.ndarray | None = None
    if before.eps_L is not None and after.eps_L is not None:
        pl = percentage_decrease(before.eps_L, after.eps_L)
        per_l = per(before.eps_L, after.eps_L)
    return RadiiChange(
        p_eps_V=percentage_decrease(before.eps_V, after.eps_V),
        p_eps_L=pl,
        per_neuron_V=per(before.eps_V, after.eps_V),
        per_neuron_L=per_l,
    )


@dataclass(eq=False)
class PerturbationBound:
    """``c = max |x̂ − x|`` with the row (index into x_pert) and coordinate where it occurs."""

    c: float
    n_rows: int
    row: int
    coord: int


def perturbation_bound(
    x_pert: ArrayLike,
    example_ids: ArrayLike,
    x_clean: ArrayLike,
    clean_ids: ArrayLike,
    chunk: int = 4096,
) -> PerturbationBound:
    """Estimate the coordinate-wise perturbation bound ``c`` of Assumption A.1 from features.

    Estimator: ``c = max over perturbed rows j and coordinates k of |x̂_jk − x_k|`` where ``x`` is
    the clean feature of the same source example (``example_ids[j]`` looked up in ``clean_ids``).
    This is the smallest ``c`` consistent with the observed perturbations (a plug-in estimate, a
    lower bound on the true support; it grows with more samples). Rows whose example has no clean
    row raise a ValueError.
    """
    xp = np.asarray(x_pert)
    xc = np.asarray(x_clean)
    ids = np.asarray(example_ids).reshape(-1)
    cids = np.asarray(clean_ids).reshape(-1)
    if xp.ndim != 2 or xc.ndim != 2 or xp.shape[1] != xc.shape[1]:
        raise ValueError(f"x_pert {xp.shape} and x_clean {xc.shape} must be [rows, n] with equal n")
    if ids.shape[0] != xp.shape[0] or cids.shape[0] != xc.shape[0]:
        raise ValueError("example_ids / clean_ids must have one entry per row of x_pert / x_clean")
    order = np.argsort(cids, kind="stable")
    sorted_c = cids[order]
    if len(np.unique(sorted_c)) != len(sorted_c):
        raise ValueError("clean_ids must list each example once")
    if len(sorted_c) == 0:
        raise ValueError("x_clean has no rows")
    pos_ok = np.minimum(np.searchsorted(sorted_c, ids), len(sorted_c) - 1)
    missing = sorted_c[pos_ok] != ids
    if np.any(missing):
        raise ValueError(
            f"{int(np.sum(missing))} perturbed rows have no clean row for their example"
        )
    clean_row = order[pos_ok]
    best, best_row, best_coord = -1.0, -1, -1
    for s in range(0, xp.shape[0], chunk):
        diff = np.abs(
            np.asarray(xp[s : s + chunk], np.float64)
            - np.asarray(xc[clean_row[s : s + chunk]], np.float64)
        )
        if not np.isfinite(diff).all():
            raise ValueError(
                "features contain NaN/inf; re-run collection in float32 or check the model"
            )
        k = int(np.argmax(diff))
        r, col = divmod(k, diff.shape[1])
        if diff[r, col] > best:
            best, best_row, best_coord = float(diff[r, col]), s + r, col
    if best_row < 0:
        raise ValueError("x_pert has no rows")
    return PerturbationBound(c=best, n_rows=int(xp.shape[0]), row=best_row, coord=best_coord)


def head_row_norms(head_weight: Any, label_token_ids: Sequence[int]) -> np.ndarray:
    """``γ_i = ‖w_i‖₂`` of the LM-head rows of the label tokens (numpy array or torch tensor).

    For a linear head ``M_i(x) = w_i·x + b_i`` this is the Lipschitz constant (Corollary B.3).
    """
    ids = [int(t) for t in label_token_ids]
    if hasattr(head_weight, "detach"):  # torch tensor, without importing torch here
        rows = head_weight[ids].detach().float().cpu().numpy()
    else:
        rows = np.asarray(head_weight)[ids]
    return np.linalg.norm(np.asarray(rows, np.float64), axis=1)
