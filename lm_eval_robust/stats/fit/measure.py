"""Robustness radii of a correction measured on a split's features, before and after.

For label neuron ``i`` the paper compares the corrected module on a perturbed prompt with the
original one on the clean prompt (Appendix C): ``f*_i = M*_i(x̂) − M_i(x) = f_i − b_i(x̂)``, with
``b(x̂) = ψ(x̂)W + β`` the correction. From ``f`` and ``f*`` come ``C``, ``V``, ``ε_V`` and ``ε_L``
(:mod:`lm_eval_robust.stats.fit.radii`) and their mean percentage decreases ``p_εV``, ``p_εL``.

* ``ε_L`` uses the Lipschitz constant of each corrected logit: for a linear correction the
  corrected head row is ``w_i − W[:n, i]``, so ``γ*_i = ‖w_i − W[:n, i]‖``; with ``ψ = [x, ‖x‖, 1]``
  the bound ``‖w_i − W[:n, i]‖ + |W[n, i]|``; a constant correction keeps ``γ``.
* Calibration corrections (batch, clean, contextual) are defined up to a constant shared by all
  labels, which changes no prediction; their radii use the ``β`` that sums to zero over the labels.
* Every kind is measured, none is copied: a correction that moves no radius shows 0 because it
  measured 0.

:func:`measure_radii` serves ``fit`` (on the train split it was fitted on) and ``replay`` (on the
test split's features, which the fit never saw).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lm_eval_robust.base.defaults import DEFAULT_RADII_PHI
from lm_eval_robust.scoring.correction import Correction
from lm_eval_robust.scoring.fit.ridge import bias_from_w
from lm_eval_robust.stats.fit.radii import compare_radii, perturbation_bound, robustness_radii
from lm_eval_robust.values.features import Features

__all__ = ["CENTERED_METHODS", "corrected_gamma", "correction_bias", "measure_radii"]

#: corrections whose β is defined up to a constant shared by the labels
CENTERED_METHODS = frozenset({"batch_calibration", "clean_calibration", "contextual_calibration"})


def _beta(corr: Correction) -> np.ndarray:
    beta = np.asarray(corr.beta, dtype=np.float64)
    return beta - beta.mean() if corr.method in CENTERED_METHODS else beta


def correction_bias(corr: Correction, x: np.ndarray) -> np.ndarray:
    """``b(x) [rows, d]`` in float64 (β centred for calibration kinds)."""
    x = np.asarray(x, dtype=np.float64)
    if corr.W is None:
        return np.broadcast_to(_beta(corr), (x.shape[0], corr.d)).copy()
    return bias_from_w(x, np.asarray(corr.W, dtype=np.float64)) + _beta(corr)


def corrected_gamma(corr: Correction, head_rows: np.ndarray) -> np.ndarray:
    """``[d]`` Lipschitz constants of the corrected label logits (see the module docstring)."""
    rows = np.asarray(head_rows, dtype=np.float64)
    if corr.W is None:
        return np.linalg.norm(rows, axis=1)
    w = np.asarray(corr.W, dtype=np.float64)
    n = rows.shape[1]
    gamma = np.linalg.norm(rows - w[:n].T, axis=1)
    if corr.psi == "norm":
        gamma = gamma + np.abs(w[n])
    return gamma


def measure_radii(
    feats: Features, corr: Correction | None, phi: float = DEFAULT_RADII_PHI, m: int | None = None
) -> dict[str, Any]:
    """``C``, ``V``, ``ε_V``, ``ε_L`` before and after ``corr`` on ``feats``, and ``p_εV``,
    ``p_εL`` (``corr=None``: after = before)."""
    p = feats.paired()
    bound = perturbation_bound(p.x_pert, p.example_id, p.x_clean, p.example_id_clean)
    n = p.x_pert.shape[1]
    gamma = np.linalg.norm(np.asarray(feats.head_rows, dtype=np.float64), axis=1)
    f = np.asarray(p.f, dtype=np.float64)
    kw = dict(phi=phi, m=m, c=bound.c, n=n)
    before = robustness_radii(f, p.example_id, gamma=gamma, **kw)
    if corr is None:
        after = before
    else:
        f_star = f - correction_bias(corr, p.x_pert)
        g_star = corrected_gamma(corr, feats.head_rows)
        after = robustness_radii(f_star, p.example_id, gamma=g_star, **kw)
    change = compare_radii(before, after)
    assert before.eps_L is not None and after.eps_L is not None
    return {
        "split": feats.task,
        "n_examples": len(np.unique(p.example_id)),
        "n_rows": int(f.shape[0]),
        "phi": before.phi,
        "m": before.m,
        "c": before.c,
        "gamma_before": before.gamma.tolist() if before.gamma is not None else None,
        "gamma_after": after.gamma.tolist() if after.gamma is not None else None,
        "C_before": before.C.tolist(),
        "C_after": after.C.tolist(),
        "V_before": before.V.tolist(),
        "V_after": after.V.tolist(),
        "eps_V_before": before.eps_V.tolist(),
        "eps_V_after": after.eps_V.tolist(),
        "eps_L_before": before.eps_L.tolist(),
        "eps_L_after": after.eps_L.tolist(),
        "p_eps_V": change.p_eps_V,
        "p_eps_L": change.p_eps_L,
    }
