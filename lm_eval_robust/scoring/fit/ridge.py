"""Input-dependent debiasing by ridge regression to f (paper Appendix F.3 and Discussion).

Setting: ``x`` is the last hidden state (the LM head's input, size ``n``), ``M(x)`` the label-token
logits (``d`` labels) and ``F = M(x̂) − M(x)`` the perturbed-minus-clean logit shift of one source
example. The bias model is ``b(x̂) = ψ(x̂)W + β`` with

* ``psi="linear"`` (default): ``ψ(x) = [xᵀ, 1]`` (``n + 1`` columns; mergeable into the LM head),
* ``psi="norm"``: ``ψ(x) = [xᵀ, ‖x‖₂, 1]`` (``n + 2`` columns; not mergeable).

``W = (ΨᵀΨ + αΨ_cᵀΨ_c + λI)⁻¹ΨᵀF`` is solved from Gram matrices accumulated in float64 by
:class:`GramAccumulator` (memory ``O(n²)`` whatever the number of rows), and
``β_i = ½(max_j R_ji + min_j R_ji)`` with ``R = F − ΨW`` from a second, streaming pass
(:class:`ResidualRange`). ``λ`` penalises every coefficient, the intercept included, exactly as
the paper's ``λI_{n+2}``. ``α`` may be negative (then ``H`` may be indefinite: :func:`solve`
reports it).

The choice of ``λ`` and ``α`` by grouped cross-validation is
:mod:`lm_eval_robust.stats.fit.ridge_cv`. Pure numpy/scipy; nothing here knows about models or the
harness.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.linalg.blas import dsyrk
from scipy.linalg.lapack import dpocon

from lm_eval_robust.base.errors import UserError

__all__ = [
    "BETA_RULES",
    "PSI_KINDS",
    "FitError",
    "GramAccumulator",
    "JitterWarning",
    "ResidualRange",
    "RidgeFit",
    "SingularGramError",
    "beta_midpoint",
    "bias_from_w",
    "fit_ridge",
    "predict_bias",
    "psi_dim",
    "psi_features",
    "solve",
]

PSI_KINDS = ("linear", "norm")

#: Jitter tried on a failed Cholesky, as multiples of the mean |diagonal| of H: 1e-10 … 1e-2.
_JITTER_EXPONENTS = tuple(range(-10, -1))


class JitterWarning(RuntimeWarning):
    """The Gram matrix needed diagonal jitter before its Cholesky factorisation succeeded."""


class FitError(UserError):
    """Inputs or settings of a fit that cannot be used (one line: the problem and the fix)."""


class SingularGramError(FitError):
    """``H`` stayed singular / indefinite with the largest jitter allowed: increase ``λ``."""


# --------------------------------------------------------------------------------------------
# features


def psi_dim(n: int, psi: str) -> int:
    """Number of columns of ψ(x) for hidden size ``n``: ``n + 1`` (linear) or ``n + 2`` (norm)."""
    _check_psi(psi)
    return n + 1 if psi == "linear" else n + 2


def psi_features(x: ArrayLike, psi: str = "linear") -> np.ndarray:
    """ψ(x) in float64: ``[x, 1]`` (linear) or ``[x, ‖x‖₂, 1]`` (norm), one row per row of x."""
    _check_psi(psi)
    x = np.asarray(x)
    if x.ndim != 2:
        raise FitError(f"features must be a 2-D array [rows, n]; got shape {x.shape}")
    b, n = x.shape
    out = np.empty((b, psi_dim(n, psi)), dtype=np.float64)
    out[:, :n] = x
    if psi == "norm":
        out[:, n] = np.linalg.norm(out[:, :n], axis=1)
    out[:, -1] = 1.0
    return out


def _check_psi(psi: str) -> None:
    if psi not in PSI_KINDS:
        raise FitError(f"psi must be one of {PSI_KINDS}; got {psi!r}")


def _psi_of_w(w: np.ndarray, n: int) -> str:
    extra = w.shape[0] - n
    if extra == 1:
        return "linear"
    if extra == 2:
        return "norm"
    raise FitError(f"W has {w.shape[0]} rows; expected n+1={n + 1} (linear) or n+2={n + 2} (norm)")


def bias_from_w(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """ψ(x)W in float64 without materialising ψ (ψ inferred from W's row count)."""
    x64 = np.asarray(x, dtype=np.float64)
    n = x64.shape[1]
    psi = _psi_of_w(w, n)
    out = x64 @ w[:n]
    if psi == "norm":
        out += np.linalg.norm(x64, axis=1)[:, None] * w[n]
    out += w[-1]
    return out


def check_finite(name: str, a: np.ndarray, chunk: int = 4096) -> None:
    """One-line ValueError naming the array and how many rows hold NaN / inf (scanned in chunks)."""
    nan_rows = inf_rows = 0
    for s in range(0, a.shape[0], chunk):
        part = a[s : s + chunk]
        if np.isfinite(part).all():
            continue
        p2 = part.reshape(part.shape[0], -1)
        nan_rows += int(np.isnan(p2).any(axis=1).sum())
        inf_rows += int(np.isinf(p2).any(axis=1).sum())
    if not (nan_rows or inf_rows):
        return
    parts = []
    if nan_rows:
        parts.append(f"NaN in {nan_rows} rows")
    if inf_rows:
        parts.append(f"inf in {inf_rows} rows")
    raise FitError(
        f"{name} contains {' and '.join(parts)} (of {a.shape[0]}); "
        "re-run collection in float32 or check the model"
    )


def as_2d(name: str, a: Any, cols: int | None = None) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 2:
        raise FitError(f"{name} must be a 2-D array [rows, cols]; got shape {arr.shape}")
    if cols is not None and arr.shape[1] != cols:
        raise FitError(f"{name} has {arr.shape[1]} columns; expected {cols}")
    if not np.issubdtype(arr.dtype, np.number):
        raise FitError(f"{name} must be numeric; got dtype {arr.dtype}")
    return arr


# --------------------------------------------------------------------------------------------
# streaming Gram accumulation


class GramAccumulator:
    """Streaming float64 sums ΨᵀΨ, ΨᵀF and Ψ_cᵀΨ_c (memory ``O(n²)`` whatever the row count).

    ``add(x_pert, f)`` takes perturbed-prompt features ``[b, n]`` and their shifts ``f [b, d]``;
    ``add_clean(x_clean)`` takes clean-prompt features for the Gram penalty. Rows are processed
    ``chunk`` at a time; each call checks its whole input for NaN/inf before changing any sum, so a
    rejected call leaves the accumulator as it was. Only the upper triangle of each Gram is
    accumulated (BLAS ``dsyrk``); the properties return full symmetric copies.
    """

    def __init__(self, n: int, d: int, psi: str = "linear", chunk: int = 2048) -> None:
        _check_psi(psi)
        if n < 1 or d < 1:
            raise FitError(f"n and d must be positive; got n={n}, d={d}")
        if chunk < 1:
            raise FitError(f"chunk must be positive; got {chunk}")
        self.n = int(n)
        self.d = int(d)
        self.psi = psi
        self.chunk = int(chunk)
        self.p = psi_dim(self.n, psi)
        self._gram = np.zeros((self.p, self.p), dtype=np.float64, order="F")
        self._cross = np.zeros((self.p, self.d), dtype=np.float64)
        self._gram_clean: np.ndarray | None = None  # allocated on first add_clean
        self.n_rows = 0
        self.n_clean = 0

    # -- accumulation ------------------------------------------------------------------------
    def add(self, x_pert: ArrayLike, f: ArrayLike) -> None:
        """Accumulate perturbed rows: ΨᵀΨ += ψ(x̂)ᵀψ(x̂), ΨᵀF += ψ(x̂)ᵀf."""
        x = as_2d("x_pert", x_pert, self.n)
        shift = as_2d("f", f, self.d)
        if x.shape[0] != shift.shape[0]:
            raise FitError(f"x_pert has {x.shape[0]} rows but f has {shift.shape[0]}")
        check_finite("x_pert", x, self.chunk)
        check_finite("f", shift, self.chunk)
        for s in range(0, x.shape[0], self.chunk):
            psi = psi_features(x[s : s + self.chunk], self.psi)
            # psi.T is F-contiguous [p, b]: dsyrk(trans=0) gives psiᵀpsi, upper triangle, in place.
            self._gram = dsyrk(1.0, psi.T, beta=1.0, c=self._gram, trans=0, lower=0, overwrite_c=1)
            self._cross += psi.T @ np.asarray(shift[s : s + self.chunk], dtype=np.float64)
        self.n_rows += x.shape[0]

    def add_clean(self, x_clean: ArrayLike) -> None:
        """Accumulate clean rows for the Gram penalty: Ψ_cᵀΨ_c += ψ(x)ᵀψ(x)."""
        x = as_2d("x_clean", x_clean, self.n)
        check_finite("x_clean", x, self.chunk)
        if self._gram_clean is None:
            self._gram_clean = np.zeros((self.p, self.p), dtype=np.float64, order="F")
        for s in range(0, x.shape[0], self.chunk):
            psi = psi_features(x[s : s + self.chunk], self.psi)
            self._gram_clean = dsyrk(
                1.0, psi.T, beta=1.0, c=self._gram_clean, trans=0, lower=0, overwrite_c=1
            )
        self.n_clean += x.shape[0]

    def merge(self, other: GramAccumulator) -> None:
        """Add another accumulator's sums into this one (same n, d, psi)."""
        if (other.n, other.d, other.psi) != (self.n, self.d, self.psi):
            raise FitError(
                f"cannot merge accumulators of (n, d, psi) {(other.n, other.d, other.psi)} "
                f"into {(self.n, self.d, self.psi)}"
            )
        self._gram += other._gram
        self._cross += other._cross
        if other._gram_clean is not None:
            if self._gram_clean is None:
                self._gram_clean = np.zeros((self.p, self.p), dtype=np.float64, order="F")
            self._gram_clean += other._gram_clean
        self.n_rows += other.n_rows
        self.n_clean += other.n_clean

    @classmethod
    def combine(cls, accs: Sequence[GramAccumulator]) -> GramAccumulator:
        """A new accumulator holding the sums of ``accs`` (at least one)."""
        if not accs:
            raise FitError("combine needs at least one accumulator")
        first = accs[0]
        out = cls(first.n, first.d, first.psi, first.chunk)
        for a in accs:
            out.merge(a)
        return out

    # -- read-out ----------------------------------------------------------------------------
    @property
    def gram(self) -> np.ndarray:
        """ΨᵀΨ as a full symmetric float64 array (a copy)."""
        return _symmetric(self._gram)

    @property
    def cross(self) -> np.ndarray:
        """ΨᵀF, float64 ``[p, d]`` (a copy)."""
        return self._cross.copy()

    @property
    def gram_clean(self) -> np.ndarray:
        """Ψ_cᵀΨ_c as a full symmetric float64 array (zeros if no clean rows were added)."""
        if self._gram_clean is None:
            return np.zeros((self.p, self.p), dtype=np.float64)
        return _symmetric(self._gram_clean)

    @property
    def mean_diag(self) -> float:
        """Mean of the diagonal of ΨᵀΨ: the scale the λ grid of cross-validation is relative to."""
        return float(np.mean(np.diagonal(self._gram)))


def _symmetric(upper: np.ndarray) -> np.ndarray:
    u = np.triu(upper)
    return u + np.triu(u, 1).T


# --------------------------------------------------------------------------------------------
# solve


def solve(
    acc: GramAccumulator, lam: float, alpha: float = 0.0, *, max_jitter_rel: float = 1e-2
) -> np.ndarray:
    """``W = (ΨᵀΨ + αΨ_cᵀΨ_c + λI)⁻¹ΨᵀF``, float64 ``[p, d]``, by Cholesky with adaptive jitter.

    The factorisation counts as failed when LAPACK rejects ``H`` (not positive definite) or when
    its reciprocal condition estimate is below ``p·eps`` (numerically singular, e.g. duplicated
    feature columns with ``λ = 0``). On failure ``J·I`` is added with ``J`` starting at
    ``1e-10·mean|diag H|`` and growing ×10 per try; a :class:`JitterWarning` names the ``J`` that
    worked. Past ``max_jitter_rel·mean|diag H|`` a :class:`SingularGramError` (a ValueError) asks
    for a larger ``λ``.
    """
    if not math.isfinite(lam) or lam < 0:
        raise FitError(f"lam must be a finite number >= 0; got {lam}")
    if not math.isfinite(alpha):
        raise FitError(f"alpha must be finite; got {alpha}")
    if acc.n_rows == 0:
        raise FitError("no perturbed rows were accumulated; call add(x_pert, f) first")
    h = acc._gram.copy(order="F")
    if alpha != 0.0:
        if acc._gram_clean is None or acc.n_clean == 0:
            raise FitError(
                f"alpha={alpha} needs clean features for the Gram penalty; call add_clean(x_clean)"
            )
        h += alpha * acc._gram_clean
    idx = np.diag_indices(acc.p)
    h[idx] += lam
    scale = float(np.mean(np.abs(np.diagonal(h))))
    if not math.isfinite(scale):
        raise FitError("Gram matrix is not finite; check the accumulated features")
    if scale == 0.0:
        scale = 1.0
    tol = acc.p * np.finfo(np.float64).eps

    jitter = 0.0
    tries = iter(_JITTER_EXPONENTS)
    while True:
        factor = _try_cholesky(h, jitter, tol)
        if factor is not None:
            break
        k = next(tries, None)
        if k is None or 10.0**k > max_jitter_rel:
            raise SingularGramError(
                f"Gram matrix is singular/ill-conditioned even with jitter {jitter:.3g} "
                f"({jitter / scale:.0e} x mean |diag|); increase lam (now {lam:g})"
                + (f" or use an alpha closer to 0 (now {alpha:g})" if alpha < 0 else "")
            )
        jitter = scale * 10.0**k
    if jitter > 0.0:
        warnings.warn(
            f"Gram matrix needed jitter {jitter:.3g} ({jitter / scale:.0e} x mean |diag|) for a "
            f"stable Cholesky; consider a larger lam (now {lam:g})",
            JitterWarning,
            stacklevel=2,
        )
    return np.asarray(cho_solve((factor, False), acc._cross, check_finite=False))


def _try_cholesky(h: np.ndarray, jitter: float, tol: float) -> np.ndarray | None:
    a = h.copy(order="F")
    if jitter:
        a[np.diag_indices(a.shape[0])] += jitter
    sym = _symmetric(a)
    anorm = float(np.abs(sym).sum(axis=0).max())
    del sym
    try:
        c, _ = cho_factor(a, lower=False, overwrite_a=True, check_finite=False)
    except LinAlgError:
        return None
    if not np.isfinite(np.diagonal(c)).all():
        return None
    rcond, info = dpocon(c, anorm, uplo="U")
    if info != 0 or not rcond >= tol:
        return None
    return np.asarray(c)


# --------------------------------------------------------------------------------------------
# residual pass for β


# β of the residuals left after ψ(x̂)W: the paper's midpoint of their range (minimises the largest
# residual, the quantity the certified radius bounds), or their mean (least squares; robust to a
# skewed residual distribution, where the midpoint shifts every prediction)
BETA_RULES = ("midpoint", "mean")


def beta_midpoint(residual_min: ArrayLike, residual_max: ArrayLike) -> np.ndarray:
    """``β_i = ½(max_j R_ji + min_j R_ji)``: minimises ``max_j |R_ji − β_i|``."""
    return 0.5 * (np.asarray(residual_max, np.float64) + np.asarray(residual_min, np.float64))


class ResidualRange:
    """Streaming per-target min / max of ``R = F − ψ(x̂)W`` (ψ inferred from W's row count)."""

    def __init__(self, d: int) -> None:
        self.d = int(d)
        self.rmin = np.full(self.d, np.inf)
        self.rmax = np.full(self.d, -np.inf)
        self.rsum = np.zeros(self.d)
        self.n_rows = 0

    def update(self, x_pert: ArrayLike, f: ArrayLike, w: ArrayLike, chunk: int = 4096) -> None:
        x = as_2d("x_pert", x_pert)
        shift = as_2d("f", f, self.d)
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 2 or w.shape[1] != self.d:
            raise FitError(f"W must be [p, {self.d}]; got shape {w.shape}")
        if x.shape[0] != shift.shape[0]:
            raise FitError(f"x_pert has {x.shape[0]} rows but f has {shift.shape[0]}")
        check_finite("x_pert", x, chunk)
        check_finite("f", shift, chunk)
        for s in range(0, x.shape[0], chunk):
            x_chunk, shift_chunk = x[s : s + chunk], shift[s : s + chunk]
            r = np.asarray(shift_chunk, dtype=np.float64) - bias_from_w(x_chunk, w)
            np.minimum(self.rmin, r.min(axis=0), out=self.rmin)
            np.maximum(self.rmax, r.max(axis=0), out=self.rmax)
            self.rsum += r.sum(axis=0)
        self.n_rows += x.shape[0]

    @property
    def beta(self) -> np.ndarray:
        """The paper's rule: the midpoint of the residual range."""
        return self.beta_by("midpoint")

    def beta_by(self, rule: str) -> np.ndarray:
        """``β`` by one of :data:`BETA_RULES`."""
        if self.n_rows == 0:
            raise FitError("no rows seen; call update() first")
        if rule == "midpoint":
            return beta_midpoint(self.rmin, self.rmax)
        if rule == "mean":
            return self.rsum / self.n_rows
        raise FitError(f"unknown beta rule {rule!r}; use one of {BETA_RULES}")

    @property
    def half_range(self) -> np.ndarray:
        """``max_j |R_ji − β_i|`` = ½(max − min): the sup residual left after β."""
        return 0.5 * (self.rmax - self.rmin)


# --------------------------------------------------------------------------------------------
# in-memory convenience


@dataclass(eq=False)
class RidgeFit:
    """A fitted input-dependent bias ``b(x) = ψ(x)W + β``."""

    W: np.ndarray
    beta: np.ndarray
    lam: float
    alpha: float
    psi: str
    n_rows: int
    n_clean: int
    residual_half_range: np.ndarray | None = field(default=None)


def fit_ridge(
    x_pert: ArrayLike,
    f: ArrayLike,
    x_clean: ArrayLike | None = None,
    lam: float = 1.0,
    alpha: float = 0.0,
    psi: str = "linear",
    chunk: int = 4096,
    beta: str = "midpoint",
) -> RidgeFit:
    """Fit ``W`` (Gram solve) and ``β`` (residual midpoint, or mean) on in-memory arrays."""
    x = as_2d("x_pert", x_pert)
    shift = as_2d("f", f)
    acc = GramAccumulator(x.shape[1], shift.shape[1], psi, chunk=chunk)
    acc.add(x, shift)
    if x_clean is not None:
        acc.add_clean(x_clean)
    w = solve(acc, lam, alpha)
    rr = ResidualRange(shift.shape[1])
    rr.update(x, shift, w, chunk=chunk)
    return RidgeFit(
        W=w,
        beta=rr.beta_by(beta),
        lam=float(lam),
        alpha=float(alpha),
        psi=psi,
        n_rows=acc.n_rows,
        n_clean=acc.n_clean,
        residual_half_range=rr.half_range,
    )


def predict_bias(fit: RidgeFit, x: ArrayLike) -> np.ndarray:
    """``ψ(x)W + β``, float64 ``[b, d]``."""
    x = as_2d("x", x)
    if psi_dim(x.shape[1], fit.psi) != fit.W.shape[0]:
        raise FitError(
            f"features have n={x.shape[1]} but the fit's W has {fit.W.shape[0]} rows "
            f"(psi={fit.psi})"
        )
    return bias_from_w(x, fit.W) + fit.beta
