"""Robustness radii (by hand) and the input-independent (constant) debiasing search."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lm_eval_robust.stats.fit.constant import constant_search, decision_gamma, plot_constant_search
from lm_eval_robust.stats.fit.radii import (
    compare_radii,
    eps_lipschitz,
    eps_variance,
    example_stats,
    head_row_norms,
    percentage_decrease,
    perturbation_bound,
    robustness_radii,
)

# 3 examples; column 0 / column 1 of f, grouped by example
#   a: [1, 3]      / [0, 0]      mean 2, var 1   / mean 0, var 0
#   b: [-2, -4]    / [1, 1]      mean -3, var 1  / mean 1, var 0
#   c: [0, 0, 6]   / [-1, 1, 3]  mean 2, var 8   / mean 1, var 8/3
TOY_F = np.array([[1, 0], [-2, 1], [3, 0], [0, -1], [-4, 1], [0, 1], [6, 3]], dtype=float)
TOY_IDS = np.array(["a", "b", "a", "c", "b", "c", "c"])


def test_example_stats_by_hand():
    st = example_stats(TOY_F, TOY_IDS)
    assert st.example_ids.tolist() == ["a", "b", "c"]
    assert st.counts.tolist() == [2, 2, 3]
    np.testing.assert_allclose(st.mean, [[2, 0], [-3, 1], [2, 1]])
    np.testing.assert_allclose(st.var, [[1.0, 0.0], [1.0, 0.0], [8.0, 8 / 3]])


def test_radii_formulas_by_hand():
    r = robustness_radii(TOY_F, TOY_IDS, phi=0.05, gamma=[2.0, 0.5], c=0.25, n=4)
    np.testing.assert_allclose(r.C, [3.0, 1.0])
    np.testing.assert_allclose(r.V, [8.0, 8 / 3])
    assert r.m == 3
    np.testing.assert_allclose(r.eps_V, [3 + math.sqrt(480), 1 + math.sqrt(160)])
    root = math.sqrt(2 * 4 * math.log(2 * 3 / 0.05))
    assert r.eps_L is not None
    np.testing.assert_allclose(r.eps_L, [3 + 0.25 * 2 * root, 1 + 0.25 * 0.5 * root])
    # m is configurable (certify a set of another size)
    r10 = robustness_radii(TOY_F, TOY_IDS, phi=0.1, m=10)
    np.testing.assert_allclose(r10.eps_V, [3 + math.sqrt(8 * 10 / 0.1), 1 + math.sqrt(8 / 3 * 100)])
    assert r10.eps_L is None
    np.testing.assert_allclose(eps_variance(3.0, 8.0, 3, 0.05), 3 + math.sqrt(480))
    np.testing.assert_allclose(eps_lipschitz(1.0, 0.5, 0.25, 4, 3, 0.05), 1 + 0.125 * root)
    with pytest.raises(ValueError, match="gamma, c and n"):
        robustness_radii(TOY_F, TOY_IDS, gamma=1.0)
    with pytest.raises(ValueError, match="phi"):
        eps_variance(1.0, 1.0, 3, 0.0)


def test_percentage_decrease_and_compare():
    assert percentage_decrease([10.0, 4.0], [5.0, 5.0]) == pytest.approx((50 - 25) / 2)
    assert percentage_decrease([0.0, 2.0], [1.0, 1.0]) == pytest.approx(50.0)  # 0 left out
    assert math.isnan(percentage_decrease([0.0], [1.0]))
    before = robustness_radii(TOY_F, TOY_IDS, gamma=1.0, c=0.1, n=4)
    # subtract the per-neuron midpoint of the example means: C drops to half the range
    after = robustness_radii(TOY_F - np.array([-0.5, 0.5]), TOY_IDS, gamma=1.0, c=0.1, n=4)
    np.testing.assert_allclose(after.C, [2.5, 0.5])
    ch = compare_radii(before, after)
    exp_v = 100 * (before.eps_V - after.eps_V) / before.eps_V
    np.testing.assert_allclose(ch.per_neuron_V, exp_v)
    assert ch.p_eps_V == pytest.approx(exp_v.mean())
    assert ch.p_eps_L is not None and ch.p_eps_L > 0


def test_perturbation_bound_by_hand():
    x_clean = np.array([[0.0, 1.0], [2.0, 2.0]])
    clean_ids = np.array([7, 3])
    x_pert = np.array([[0.5, 1.0], [2.0, 1.2], [-0.1, 1.3], [2.9, 2.0]])
    ids = np.array([7, 3, 7, 3])
    pb = perturbation_bound(x_pert, ids, x_clean, clean_ids, chunk=3)
    assert pb.c == pytest.approx(0.9)
    assert (pb.row, pb.coord) == (3, 0)
    with pytest.raises(ValueError, match="no clean row"):
        perturbation_bound(x_pert, np.array([7, 3, 7, 99]), x_clean, clean_ids)


def test_head_norms_and_decision_gamma():
    w = np.array([[3.0, 4.0], [0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(head_row_norms(w, [0, 2]), [5.0, math.sqrt(2)])
    assert decision_gamma(w, [1, 0]) == pytest.approx(math.sqrt(9 + 9))
    torch = pytest.importorskip("torch")
    assert decision_gamma(torch.tensor(w, dtype=torch.bfloat16), [1, 0]) == pytest.approx(
        math.sqrt(18)
    )
    np.testing.assert_allclose(head_row_norms(torch.tensor(w), [0]), [5.0])


# ---------------------------------------------------------------------------------------------
# constant search


def _binary(mu_of_example, z_clean_of_label, examples=60, k=10, seed=0, noise=0.3):
    """Per-row label logits [M0, M1] where z = M1 − M0 is the clean decision value plus f."""
    rng = np.random.default_rng(seed)
    y_ex = np.arange(examples) % 2
    mu = np.array([mu_of_example(e) for e in range(examples)]) + 0.1 * rng.normal(size=examples)
    ids = np.repeat(np.arange(examples), k)
    zc = np.array([z_clean_of_label[y] for y in y_ex]) + 0.3 * rng.normal(size=examples)
    fz = mu[ids] + noise * rng.normal(size=ids.size)
    zp = zc[ids] + fz
    m0 = rng.normal(size=ids.size)  # a common level: irrelevant to the decision
    logits_pert = np.stack([m0, m0 + zp], axis=1)
    f = np.stack([np.zeros_like(fz), fz], axis=1)
    logits_clean = np.stack([np.zeros(examples), zc], axis=1)
    return logits_pert, f, y_ex[ids], ids, logits_clean, y_ex


def test_constant_search_finds_planted_offset():
    # clean z = ±2; every perturbation adds ≈ +3 to z (a systematic push toward label 1)
    lp, f, y, ids, lc, yc = _binary(lambda e: 3.0, {0: -2.0, 1: 2.0})
    res = constant_search(lp, f, y, ids, gamma=1.5, c=0.2, n=16, logits_clean=lc, labels_clean=yc)
    assert res.grid.size == 201 and res.grid[0] == -res.C and res.grid[-1] == res.C
    assert res.b is not None, res.reason
    assert res.b == pytest.approx(3.0, abs=0.3)
    assert res.at_b is not None
    assert res.at_b["bac_pert"] > res.baseline["bac_pert"] + 0.3
    assert res.at_b["p_eps_V"] > 0 and res.at_b["p_eps_L"] > 0
    assert res.overlap[np.argmin(np.abs(res.grid - res.b))]
    # ε_V(b) = C*(b) + sqrt(V m / φ), C*(b) = max_x |μ_x − b|
    st = example_stats(f[:, 1] - f[:, 0], ids)
    cstar = np.abs(st.mean[:, 0][None, :] - res.grid[:, None]).max(1)
    np.testing.assert_allclose(res.C_star, cstar, atol=1e-12)
    np.testing.assert_allclose(res.eps_V, cstar + math.sqrt(res.V * res.m / 0.05))
    # β = [−b/2, +b/2]: subtracting it shifts the decision variable by exactly b
    beta = res.beta()
    assert beta is not None
    deb = lp - beta
    np.testing.assert_allclose(deb[:, 1] - deb[:, 0], lp[:, 1] - lp[:, 0] - res.b)
    # the BAC curve is "predict 1 iff z − b > 0"
    i = 37
    z = lp[:, 1] - lp[:, 0]
    pred = (z - res.grid[i] > 0).astype(int)
    rec = [np.mean(pred[y == c] == c) for c in (0, 1)]
    assert res.bac[i] == pytest.approx(np.mean(rec))


def test_constant_search_reports_no_overlap_plainly():
    # example means in {−1, 3}: C = 3, C*(b) is lowest near b = 1; but perturbed z sits at
    # ≈ −3 (label 0) / −2 (label 1) so BAC is best near b = −2.5: the regions cannot meet
    lp, f, y, ids, _, _ = _binary(
        lambda e: -1.0 if (e // 2) % 2 else 3.0, {0: -3.0, 1: -2.0}, noise=0.05
    )
    # make perturbed z independent of f for this construction
    rng = np.random.default_rng(1)
    z = np.where(y == 1, -2.0, -3.0) + 0.1 * rng.normal(size=y.size)
    lp = np.stack([np.zeros_like(z), z], axis=1)
    res = constant_search(lp, f, y, ids, gamma=1.0, c=0.1, n=8)
    assert res.b is None and res.at_b is None and res.beta() is None
    assert res.reason.startswith("no overlap")
    assert "BAC b in [" in res.reason and "eps_V b in [" in res.reason
    assert not res.overlap.any()
    assert res.region_bac.any() and res.region_eps_V.any()


def test_constant_search_zero_bias_and_validation():
    ids = np.repeat(np.arange(4), 3)
    y = ids % 2
    z = np.where(y == 1, 1.0, -1.0)
    res = constant_search(z, np.zeros(12), y, ids)
    assert res.b is None and "nothing to debias" in res.reason
    with pytest.raises(ValueError, match="0 or 1"):
        constant_search(z, np.zeros(12), y + 1, ids)
    with pytest.raises(ValueError, match="gamma, c and n"):
        constant_search(z, np.ones(12), y, ids, gamma=1.0)


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    lp, f, y, ids, _, _ = _binary(lambda e: 3.0, {0: -2.0, 1: 2.0})
    res = constant_search(lp, f, y, ids, gamma=1.5, c=0.2, n=16)
    out = plot_constant_search(res, tmp_path / "sub" / "fig3.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    # also without ε_L and without a chosen b
    res2 = constant_search(lp[:, 1] - lp[:, 0], -f[:, 1] * 0 + 5.0, y, ids)
    out2 = plot_constant_search(res2, tmp_path / "fig3b.png")
    assert out2.stat().st_size > 5000
