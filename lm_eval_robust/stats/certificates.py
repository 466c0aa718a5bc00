"""Margin certificates: per example (Theorem E.1, Remark E.3) and population level (Remark E.4).

Inputs are plain arrays with ids (:class:`~lm_eval_robust.stats.margins.MarginTable`: the
margins, shifts and the estimation / verification split are described there), built from the
per-doc dicts that ``process_results`` returns; nothing here knows the harness. The harness
aggregations are :mod:`lm_eval_robust.stats.certify`, the check of each estimator on the
held-back variants :mod:`lm_eval_robust.stats.certificate_checks`.

Estimators (per example and competitor, from the ``n`` estimation shifts)
-------------------------------------------------------------------------
* Box ``B_j = [l_j, u_j]`` = [min, max] of the shifts; ``V_B = u - l``, ``c_j = V_B/2``; the
  reference is uniform on the box: mean ``mu_j = (l+u)/2`` (the paper writes ``V_B/2``, the
  midpoint of a box ``[0, V_B]``), variance ``nu_j = V_B^2/12``.
* ``eps_B`` (``eps_rule="order"``, default) = ``1/(n+1)``. Only the out-of-box mass that lies in
  the failure event matters, ``P_D(E minus B)``. The failure event ``E = {Z <= -rho}`` is a lower
  half-line and can be certified only when ``-rho < u`` (otherwise ``P_u(E) = 1``), so
  ``E minus B`` is within ``{Z < l}``: the mass below the sample minimum. For exchangeable
  variants its expectation is exactly ``1/(n+1)``, whatever the distribution. The rule
  ``"zero"`` (``eps_B = 0``: the box is assumed to hold all the mass) reproduces the paper's
  plug-in reading; it is not conservative for small ``n``.
* ``C V_B`` (``density_rule="histogram"``, default) = the largest ratio of a histogram density to
  the uniform density ``1/V_B``: ``k = ceil(sqrt(n))`` equal bins on the box,
  ``C V_B = k * max_bin_count / n``. It is >= 1 by construction, equals ~1 for a flat
  distribution and grows with concentration; the maximum of noisy bin counts is biased upwards
  (conservative). ``"uniform"`` sets ``C V_B = 1`` (the paper's reading).
* A box of zero width (all estimation shifts equal) is a point mass: ``c = nu = 0``,
  ``C V_B = 1``, and the certificate reduces to ``rho + mu > 0``.

Note that with ``kappa >= ln((1-eps)/(phi_j-eps)) > 1/2`` every threshold below lies outside
the box (``xi > c``): under the uniform reference the failure event of a certified example has
zero mass, so in practice the guarantee rests on the out-of-box lower tail, i.e. on ``eps_B``.

Conditions (strict ``>``, ``phi_j = phi/(Q-1)``, ``kappa_j = ln(C V_B/(phi_j - eps_B))``)
-------------------------------------------------------------------------------------------
* Hoeffding/Bernstein (``p_H``): ``rho_j > -mu_j + min(xi_H, xi_B)`` with
  ``xi_H = c sqrt(2 kappa)``, ``gamma = (2/3) c kappa``, ``xi_B = gamma + sqrt(gamma^2 +
  2 kappa nu)``; this makes ``P_u(Z - mu <= -(rho + mu)) <= e^-kappa``, hence
  ``P_D(rho_j + Z_j <= 0) <= C V_B e^-kappa + eps_B = phi_j``. The example is certified when all
  ``j`` pass (union bound: ``P_D(misclassified) <= sum_j phi_j = phi``).
* Chebyshev (``p_C``), Cantelli's one-sided form (the failure event is one-sided, and Cantelli
  is tighter than the two-sided Chebyshev ``t >= sqrt(nu e^kappa)``):
  ``P_u(Z - mu <= -t) <= nu/(nu + t^2) <= e^-kappa`` iff ``t >= sqrt(nu (e^kappa - 1))``, so
  ``rho_j > -mu_j + sqrt(nu_j (e^kappa_j - 1))``. With the uniform reference
  ``nu = c^2/3`` and both thresholds are ``c`` times a function of ``kappa``: Cantelli is the
  smaller one iff ``kappa < 2.918``. ``chebyshev="empirical"`` instead applies Cantelli to the
  perturbation distribution itself with the estimation half's mean and variance (no box, no
  ``C``, ``eps_B``; ``e^-kappa = phi_j``): "distribution dependent", as the paper's remark says.

Population level (Remark E.4): ``P = (1-phi) max(0, s/m - sqrt(ln(2/psi)/(2m)))`` for ``s`` of
``m`` examples certified; the paper computes it on the hold-out split (``*_holdout`` tasks).

Units: :class:`Certification` holds fractions and offers percentages (``p_h``, ``p_c``: the
paper's units); the harness aggregations return fractions in [0, 1] like every other metric of
the lm-eval table (BAC, ``delta_drop``). All return NaN when not computable (no clean example,
no variants, or too few estimation variants for any example: ``eps_B >= phi_j``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from lm_eval_robust.base.defaults import DEFAULT_CERT_PHI, DEFAULT_CERT_PSI
from lm_eval_robust.stats.margins import MarginTable, estimation_mask, pairwise_margins

__all__ = [
    "DEFAULT_ESTIMATOR",
    "ESTIMATORS",
    "CertConfig",
    "Certification",
    "MarginTable",
    "PairStats",
    "box_stats",
    "cantelli_threshold",
    "certify",
    "hoeffding_bernstein_threshold",
    "kappa",
    "population_certificate",
]

EpsRule = Literal["order", "zero"]
DensityRule = Literal["histogram", "uniform"]
ChebyshevRule = Literal["reference", "empirical"]


#: the named estimators: (eps_rule, density_rule) of each
ESTIMATORS: dict[str, tuple[EpsRule, DensityRule]] = {
    "paper": ("zero", "uniform"),
    "distribution_free": ("order", "histogram"),
}
DEFAULT_ESTIMATOR = "paper"


@dataclass(frozen=True)
class CertConfig:
    """Settings of the certificates (defaults: the paper's phi = 0.1, psi = 0.05, and the paper's
    estimator; see :data:`ESTIMATORS` and :meth:`named`)."""

    phi: float = DEFAULT_CERT_PHI
    psi: float = DEFAULT_CERT_PSI
    seed: int = 0
    eps_rule: EpsRule = ESTIMATORS[DEFAULT_ESTIMATOR][0]
    density_rule: DensityRule = ESTIMATORS[DEFAULT_ESTIMATOR][1]
    chebyshev: ChebyshevRule = "reference"

    @classmethod
    def named(
        cls,
        estimator: str,
        phi: float = DEFAULT_CERT_PHI,
        psi: float = DEFAULT_CERT_PSI,
        seed: int = 0,
    ) -> CertConfig:
        """``paper`` (eps_B = 0, C V_B = 1: the box of the estimation shifts holds the
        perturbation distribution, read as uniform on it) or ``distribution_free``
        (eps_B = 1/(n+1), C V_B from a histogram: no assumption on the shifts beyond
        exchangeability, conservative)."""
        if estimator not in ESTIMATORS:
            raise ValueError(
                f"unknown certificate estimator {estimator!r}; use one of {sorted(ESTIMATORS)}"
            )
        eps_rule, density_rule = ESTIMATORS[estimator]
        return cls(phi=phi, psi=psi, seed=seed, eps_rule=eps_rule, density_rule=density_rule)

    @property
    def estimator(self) -> str:
        """The name of this setting's estimator, or ``custom``."""
        for name, rules in ESTIMATORS.items():
            if rules == (self.eps_rule, self.density_rule) and self.chebyshev == "reference":
                return name
        return "custom"

    def __post_init__(self) -> None:
        if not 0.0 < self.phi < 1.0:
            raise ValueError(f"phi must be in (0, 1); got {self.phi}")
        if not 0.0 < self.psi < 1.0:
            raise ValueError(f"psi must be in (0, 1); got {self.psi}")
        if self.eps_rule not in ("order", "zero"):
            raise ValueError(f"eps_rule must be 'order' or 'zero'; got {self.eps_rule!r}")
        if self.density_rule not in ("histogram", "uniform"):
            raise ValueError(
                f"density_rule must be 'histogram' or 'uniform'; got {self.density_rule!r}"
            )
        if self.chebyshev not in ("reference", "empirical"):
            raise ValueError(
                f"chebyshev must be 'reference' or 'empirical'; got {self.chebyshev!r}"
            )


# --------------------------------------------------------------------------------------------
# Formulas


@dataclass(frozen=True, eq=False)
class PairStats:
    """Per example and competitor ``[E, Q-1]``: the clean margin and the box statistics."""

    rho: np.ndarray
    n: np.ndarray
    low: np.ndarray
    high: np.ndarray
    c: np.ndarray
    mu: np.ndarray
    nu: np.ndarray
    eps: np.ndarray
    cv: np.ndarray
    emp_mean: np.ndarray
    emp_var: np.ndarray


def _padded(values: np.ndarray, rows: np.ndarray, n_rows: int) -> np.ndarray:
    """Scatter ``values [R, P]`` into ``[n_rows, P, Kmax]`` (NaN padded) by row index."""
    counts = np.bincount(rows, minlength=n_rows)
    kmax = int(counts.max()) if counts.size and counts.max() > 0 else 1
    out = np.full((n_rows, values.shape[1], kmax), np.nan)
    if rows.size:
        order = np.argsort(rows, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot = np.arange(rows.size) - starts[rows[order]]
        out[rows[order], :, slot] = values[order]
    return out


def _histogram_cv(z: np.ndarray, n: np.ndarray, low: np.ndarray, width: np.ndarray) -> np.ndarray:
    """``k * max_bin_count / n`` with ``k = ceil(sqrt(n))`` equal bins on ``[low, low+width]``."""
    e, p, _ = z.shape
    k = np.maximum(1, np.ceil(np.sqrt(n))).astype(np.int64)  # [E]
    kb = int(k.max()) if k.size else 1
    ok = np.isfinite(z)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = (z - low[..., None]) / width[..., None]
    b = np.floor(np.nan_to_num(frac) * k[:, None, None]).astype(np.int64)
    b = np.clip(b, 0, k[:, None, None] - 1)
    cell = (np.arange(e)[:, None, None] * p + np.arange(p)[None, :, None]) * kb + b
    counts = np.bincount(cell[ok], minlength=e * p * kb).reshape(e, p, kb)
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = k[:, None] * counts.max(axis=2) / n[:, None]
    return np.where(width > 0, cv, 1.0)


def box_stats(table: MarginTable, est: np.ndarray, config: CertConfig = CertConfig()) -> PairStats:
    """Clean margins and box statistics from the estimation variants (``est [R]``)."""
    e = table.n_examples
    rho = pairwise_margins(np.nan_to_num(table.clean_ll), np.maximum(table.gold, 0))
    var_rho = pairwise_margins(table.var_ll, table.var_gold)
    shifts = var_rho - rho[table.var_example]
    rows = table.var_example[est]
    z = _padded(shifts[est], rows, e)
    n = np.bincount(rows, minlength=e).astype(np.float64)
    has = n > 0
    with np.errstate(invalid="ignore"):
        low = np.where(has[:, None], np.nanmin(np.where(has[:, None, None], z, 0.0), axis=2), 0)
        high = np.where(has[:, None], np.nanmax(np.where(has[:, None, None], z, 0.0), axis=2), 0)
        width = high - low
        emp_mean = np.where(has[:, None], np.nanmean(np.where(has[:, None, None], z, 0.0), 2), 0)
        sq = np.nansum((z - emp_mean[..., None]) ** 2, axis=2)
        emp_var = np.where(n[:, None] > 1, sq / np.maximum(n[:, None] - 1, 1), np.nan)
    if config.eps_rule == "order":
        eps = np.broadcast_to((1.0 / (n + 1.0))[:, None], width.shape).copy()
    else:
        eps = np.zeros_like(width)
    eps = np.where(has[:, None], eps, 1.0)
    if config.density_rule == "histogram":
        cv = _histogram_cv(z, np.maximum(n, 1), low, width)
    else:
        cv = np.ones_like(width)
    return PairStats(
        rho=rho,
        n=np.broadcast_to(n[:, None], width.shape).copy(),
        low=low,
        high=high,
        c=width / 2.0,
        mu=(low + high) / 2.0,
        nu=width**2 / 12.0,
        eps=eps,
        cv=cv,
        emp_mean=emp_mean,
        emp_var=emp_var,
    )


def kappa(cv: np.ndarray, phi_j: float, eps: np.ndarray) -> np.ndarray:
    """``ln(C V_B / (phi_j - eps_B))``; +inf where ``eps_B >= phi_j`` (no certificate)."""
    cv = np.asarray(cv, dtype=np.float64)
    gap = phi_j - np.asarray(eps, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(gap > 0, np.log(cv / np.where(gap > 0, gap, 1.0)), np.inf)


def hoeffding_bernstein_threshold(c: np.ndarray, nu: np.ndarray, kap: np.ndarray) -> np.ndarray:
    """``min(c sqrt(2 kappa), gamma + sqrt(gamma^2 + 2 kappa nu))`` with ``gamma = 2 c kappa/3``."""
    c, nu, kap = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (c, nu, kap)))
    with np.errstate(invalid="ignore"):
        xi_h = c * np.sqrt(2.0 * kap)
        gamma = 2.0 / 3.0 * c * kap
        xi_b = gamma + np.sqrt(gamma**2 + 2.0 * kap * nu)
        xi = np.fmin(xi_h, xi_b)
    return np.where(np.isinf(kap), np.inf, np.where(c == 0, 0.0, xi))


def cantelli_threshold(nu: np.ndarray, kap: np.ndarray) -> np.ndarray:
    """``t = sqrt(nu (e^kappa - 1))``: Cantelli's ``nu/(nu + t^2) <= e^-kappa``."""
    nu, kap = np.broadcast_arrays(np.asarray(nu, np.float64), np.asarray(kap, np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        t = np.sqrt(nu * np.expm1(kap))
    return np.where(np.isinf(kap), np.inf, np.where(nu == 0, 0.0, t))


def population_certificate(s: int | float, m: int, phi: float, psi: float) -> float:
    """Remark E.4: ``(1-phi) max(0, s/m - sqrt(ln(2/psi)/(2m)))`` as a fraction; NaN if m = 0."""
    if m <= 0:
        return math.nan
    return (1.0 - phi) * max(0.0, s / m - math.sqrt(math.log(2.0 / psi) / (2.0 * m)))


# --------------------------------------------------------------------------------------------
# Certification


@dataclass(frozen=True, eq=False)
class Certification:
    """Per-example certificates of one task and the rates.

    ``certified_h``/``certified_c [E]``; ``eligible [E]``: the example has a clean doc (the
    denominator ``m``); ``possible_h``/``possible_c [E]``: the rule can pass at all (e.g.
    ``eps_B < phi_j`` for every competitor); ``est [R]``: variant used for estimation (else
    verification).
    """

    table: MarginTable
    config: CertConfig
    stats: PairStats
    est: np.ndarray
    eligible: np.ndarray
    possible_h: np.ndarray
    possible_c: np.ndarray
    certified_h: np.ndarray
    certified_c: np.ndarray
    note: str = ""

    @property
    def m(self) -> int:
        return int(self.eligible.sum())

    def computable(self, rule: Literal["h", "c"]) -> bool:
        """Some eligible example can be certified by the rule at all."""
        possible = self.possible_h if rule == "h" else self.possible_c
        return self.m > 0 and bool(possible.any())

    def rate(self, rule: Literal["h", "c"]) -> float:
        """Fraction of the eligible examples certified; NaN if not computable."""
        if not self.computable(rule):
            return math.nan
        cert = self.certified_h if rule == "h" else self.certified_c
        return float(cert[self.eligible].mean())

    def population(self, rule: Literal["h", "c"]) -> float:
        """Population guarantee (Remark E.4) as a fraction; NaN if not computable."""
        if not self.computable(rule):
            return math.nan
        cert = self.certified_h if rule == "h" else self.certified_c
        return population_certificate(
            int(cert[self.eligible].sum()), self.m, self.config.phi, self.config.psi
        )

    @property
    def p_h(self) -> float:
        return 100.0 * self.rate("h")

    @property
    def p_c(self) -> float:
        return 100.0 * self.rate("c")

    @property
    def P_h(self) -> float:
        return 100.0 * self.population("h")

    @property
    def P_c(self) -> float:
        return 100.0 * self.population("c")


def certify(table: MarginTable, config: CertConfig = CertConfig()) -> Certification:
    """Hoeffding/Bernstein and Chebyshev (Cantelli) certificates for every example."""
    est = estimation_mask(table, config.seed)
    st = box_stats(table, est, config)
    q = table.n_classes
    e = table.n_examples
    eligible = table.has_clean.copy()
    if q < 2 or e == 0:
        no = np.zeros(e, dtype=bool)
        return Certification(
            table, config, st, est, eligible, no, no, no, no, "fewer than 2 labels"
        )
    phi_j = config.phi / (q - 1)
    # a box needs two estimation shifts: one shift is a zero-width box that certifies whatever
    # that single variant did
    few = st.n < 2
    kap = np.where(few, np.inf, kappa(st.cv, phi_j, st.eps))
    slack = st.rho + st.mu
    pass_h = slack > hoeffding_bernstein_threshold(st.c, st.nu, kap)
    possible_h = eligible & np.all(np.isfinite(kap), axis=1)
    if config.chebyshev == "reference":
        pass_c = slack > cantelli_threshold(st.nu, kap)
        possible_c = possible_h
    else:
        kap_d = np.where(st.n >= 2, math.log(1.0 / phi_j), np.inf)
        pass_c = st.rho + st.emp_mean > cantelli_threshold(np.nan_to_num(st.emp_var), kap_d)
        possible_c = eligible & np.all(np.isfinite(kap_d), axis=1)
    cert_h = possible_h & np.all(pass_h, axis=1)
    cert_c = possible_c & np.all(pass_c, axis=1)
    note = ""
    n_med = float(np.median(st.n[eligible, 0])) if eligible.any() and st.n.size else 0.0
    if not eligible.any():
        note = "not computable: no example has its clean prompt (pert_id 0)"
    elif n_med < 2:
        note = (
            "not computable: fewer than 2 estimation variants per example (K >= 3 needed; "
            "the box of the estimation shifts needs two)"
        )
    elif not possible_h.any():
        n_need = math.floor(1.0 / phi_j - 1.0) + 1
        note = (
            f"eps_B = 1/(n+1) >= phi_j = {phi_j:.3g} for every example: need at least {n_need} "
            f"estimation variants per example (K >= {2 * n_need - 1}), or the paper "
            "estimator (--certificate paper)"
        )
    elif n_med < 10:
        note = (
            f"certificates from {n_med:g} estimation variants per example: a box from so few "
            "shifts understates their spread; read the rates beside the held-back check, and "
            "prefer K >= 20"
        )
    return Certification(
        table, config, st, est, eligible, possible_h, possible_c, cert_h, cert_c, note
    )
