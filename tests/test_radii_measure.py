"""Radii before and after a correction are measured, not copied (stats/fit/measure.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_robust.scoring.correction import Correction
from lm_eval_robust.stats.fit.measure import corrected_gamma, correction_bias, measure_radii
from lm_eval_robust.values.features import Features


def _features(seed: int = 0, n: int = 6, d: int = 2) -> Features:
    rng = np.random.default_rng(seed)
    ex = np.array([f"e{i}" for i in range(8) for _ in range(5)], dtype=object)
    pert = np.array([p for _ in range(8) for p in range(5)])
    x = rng.normal(size=(40, n)).astype(np.float32)
    head = rng.normal(size=(d, n)).astype(np.float32)
    return Features(
        task="ni322_format_pert_train",
        x=x,
        label_logits=(x @ head.T).astype(np.float32),
        label_token_ids=np.tile(np.arange(d), (40, 1)),
        pert_id=pert,
        gold=np.array([i % 2 for i in range(8) for _ in range(5)]),
        example_id=ex,
        fingerprint={},
        head_rows=head,
    )


def _corr(method: str, W: np.ndarray | None, beta: np.ndarray) -> Correction:
    return Correction(
        method=method, W=W, beta=beta, label_token_ids=[0, 1], labels=["a", "b"], task="ni322"
    )


def test_eps_l_uses_the_corrected_head_rows() -> None:
    feats = _features()
    W = np.zeros((7, 2))
    W[:6, 0] = feats.head_rows[0] * 0.5  # halves label 0's row: its gamma halves
    corr = _corr("ridge", W, np.zeros(2))
    g = corrected_gamma(corr, feats.head_rows)
    base = np.linalg.norm(feats.head_rows, axis=1)
    assert g[0] == pytest.approx(base[0] / 2, rel=1e-6)
    assert g[1] == pytest.approx(base[1], rel=1e-6)
    r = measure_radii(feats, corr)
    assert r["eps_L_after"][0] < r["eps_L_before"][0]  # would be equal with the base norms
    assert r["gamma_after"][0] == pytest.approx(base[0] / 2, rel=1e-6)
    assert r["p_eps_L"] > 0


def test_calibration_radii_are_measured() -> None:
    """A label offset moves C (f* = f - b), so its p_eps_V is computed, and a shared constant
    (which changes no prediction) does not change it."""
    feats = _features(1)
    beta = np.array([0.3, -0.1])
    r1 = measure_radii(feats, _corr("batch_calibration", None, beta))
    r2 = measure_radii(feats, _corr("batch_calibration", None, beta + 5.0))
    assert r1["p_eps_V"] == pytest.approx(r2["p_eps_V"])
    assert r1["C_after"] != r1["C_before"]
    none = measure_radii(feats, None)
    assert none["p_eps_V"] == 0.0


def test_correction_bias_matches_the_formula() -> None:
    feats = _features(2)
    rng = np.random.default_rng(0)
    W = rng.normal(size=(7, 2))
    beta = np.array([0.2, -0.4])
    b = correction_bias(_corr("ridge", W, beta), feats.x)
    want = feats.x.astype(np.float64) @ W[:6] + W[6] + beta
    assert np.allclose(b, want)
