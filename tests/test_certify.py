"""Margin certificates: formulas against hand-computed values, the split, aggregations, and a
Monte Carlo check on a linear classifier whose perturbation distribution is known."""

from __future__ import annotations

import logging
import math
import random

import numpy as np
import pytest

from lm_eval_robust.stats import certificate_checks as checks
from lm_eval_robust.stats import certificates as ct
from lm_eval_robust.stats import certify as harness
from lm_eval_robust.stats import margins
from lm_eval_robust.stats.certificates import CertConfig
from lm_eval_robust.stats.margins import MarginTable

#: the conservative estimator, which the hand computations below follow
FREE = CertConfig.named("distribution_free")


def _table(clean: list[list[float]], gold: list[int], variants: dict[int, list[list[float]]]):
    """Items for examples ``0..E-1``: clean lls, gold, and per example its variants' lls."""
    items = []
    for e, (ll, g) in enumerate(zip(clean, gold, strict=True)):
        items.append({"task": "t", "example_id": f"e{e}", "pert_id": 0, "gold": g, "ll": ll})
        for p, vll in enumerate(variants.get(e, []), start=1):
            items.append({"task": "t", "example_id": f"e{e}", "pert_id": p, "gold": g, "ll": vll})
    return items


def _with_estimation_shifts(rhos: list[float], est_shifts: list[float], k: int, seed: int = 0):
    """Binary examples (gold 0, clean ll [0, -rho]) whose estimation half has exactly
    ``est_shifts`` (verification variants get shift 0)."""
    clean = [[0.0, -r] for r in rhos]
    draft = _table(clean, [0] * len(rhos), {e: [[0.0, 0.0]] * k for e in range(len(rhos))})
    table = MarginTable.from_items(draft)
    est = margins.estimation_mask(table, seed)
    var_ll = table.var_ll.copy()
    for e, rho in enumerate(rhos):
        rows = np.flatnonzero((table.var_example == e) & est)
        assert len(rows) == len(est_shifts)
        for r, z in zip(rows, est_shifts, strict=True):
            var_ll[r] = [0.0, -(rho + z)]  # margin rho + z
        for r in np.flatnonzero((table.var_example == e) & ~est):
            var_ll[r] = [0.0, -rho]
    return MarginTable(
        table.example_ids,
        table.gold,
        table.clean_ll,
        table.has_clean,
        table.var_example,
        table.var_pert_id,
        var_ll,
    )


# ---------------------------------------------------------------------------------- formulas


def test_pairwise_margins_multiclass() -> None:
    ll = np.array([[0.0, -1.0, -3.0], [-2.0, -0.5, -1.0]])
    m = margins.pairwise_margins(ll, np.array([0, 2]))
    # example 0, gold 0: vs 1 -> 1, vs 2 -> 3; example 1, gold 2: vs 0 -> 1, vs 1 -> -0.5
    np.testing.assert_allclose(m, [[1.0, 3.0], [1.0, -0.5]])


def test_kappa_and_thresholds_by_hand() -> None:
    # C V_B = 1, phi_j = 0.5, eps = 0.2 -> kappa = ln(1/0.3) = 1.2039728
    kap = ct.kappa(np.array(1.0), 0.5, np.array(0.2))
    assert float(kap) == pytest.approx(1.2039728043)
    # c = 2, nu = 4/3: xi_H = 2 sqrt(2.4079456) = 3.10351; gamma = 1.6052971,
    # xi_B = 1.6052971 + sqrt(2.5769787 + 3.2105941) = 4.0110 -> min = 3.1035
    xi = ct.hoeffding_bernstein_threshold(np.array(2.0), np.array(4 / 3), kap)
    assert float(xi) == pytest.approx(3.1035113, rel=1e-6)
    # Bernstein wins only for kappa < 9/8 and small variance: kappa = ln 2, c = 2, nu = 0.01:
    # gamma = 0.9241962, xi_B = 0.9241962 + sqrt(0.8541386 + 0.0138629) = 1.8558618 < xi_H = 2.3548
    xi_small = ct.hoeffding_bernstein_threshold(np.array(2.0), np.array(0.01), np.log(2.0))
    assert float(xi_small) == pytest.approx(1.8558618, rel=1e-6)
    # Cantelli: sqrt(nu (e^kappa - 1)) = sqrt(4/3 * (1/0.3 - 1)) = sqrt(3.1111) = 1.7638
    assert float(ct.cantelli_threshold(np.array(4 / 3), kap)) == pytest.approx(1.7638342)
    # eps >= phi_j: no certificate
    assert np.isinf(ct.kappa(np.array(1.0), 0.1, np.array(0.2)))
    assert np.isinf(ct.hoeffding_bernstein_threshold(np.array(1.0), np.array(1.0), np.inf))


def test_population_certificate_by_hand() -> None:
    # (1 - 0.1) * (0.3 - sqrt(ln(40)/200)) = 0.9 * (0.3 - 0.1358101) = 0.1477709
    assert ct.population_certificate(30, 100, 0.1, 0.05) == pytest.approx(0.1477709, rel=1e-6)
    assert ct.population_certificate(5, 100, 0.1, 0.05) == 0.0
    assert math.isnan(ct.population_certificate(0, 0, 0.1, 0.05))


def test_box_statistics_and_certificates_by_hand() -> None:
    # estimation shifts [-1, 0, 1, 3]: l = -1, u = 3, V = 4, c = 2, mu = 1, nu = 16/12,
    # eps = 1/5; histogram: 2 bins [-1, 1), [1, 3] holding 2 and 2 -> C V_B = 2*2/4 = 1.
    # phi = 0.5 (binary: phi_j = 0.5) -> kappa = ln(1/0.3); Hoeffding needs rho + 1 > 3.10351,
    # Cantelli needs rho + 1 > 1.7638.
    table = _with_estimation_shifts([2.5, 1.0, 0.5], [-1.0, 0.0, 1.0, 3.0], k=8)
    cfg = CertConfig.named("distribution_free", phi=0.5)
    cert = ct.certify(table, cfg)
    st = cert.stats
    np.testing.assert_allclose(st.low[:, 0], -1.0)
    np.testing.assert_allclose(st.high[:, 0], 3.0)
    np.testing.assert_allclose(st.c[:, 0], 2.0)
    np.testing.assert_allclose(st.mu[:, 0], 1.0)
    np.testing.assert_allclose(st.nu[:, 0], 16 / 12)
    np.testing.assert_allclose(st.eps[:, 0], 0.2)
    np.testing.assert_allclose(st.cv[:, 0], 1.0)
    np.testing.assert_allclose(st.rho[:, 0], [2.5, 1.0, 0.5])
    assert cert.certified_h.tolist() == [True, False, False]
    assert cert.certified_c.tolist() == [True, True, False]
    assert cert.p_h == pytest.approx(100 / 3)
    assert cert.p_c == pytest.approx(200 / 3)
    # Remark E.4 with s = 1 of m = 3 at phi = 0.5, psi = 0.05: 1/3 - sqrt(ln 40 / 6) < 0 -> 0
    assert cert.P_h == 0.0


def test_histogram_density_ratio_by_hand() -> None:
    # 9 shifts [0 x6, 1, 2, 3]: 3 bins of width 1 hold 6, 1, 2 -> C V_B = 3 * 6 / 9 = 2
    table = _with_estimation_shifts([1.0], [0.0] * 6 + [1.0, 2.0, 3.0], k=18)
    st = ct.certify(table, FREE).stats
    assert float(st.cv[0, 0]) == pytest.approx(2.0)
    assert float(st.eps[0, 0]) == pytest.approx(0.1)
    uniform = ct.certify(table, CertConfig(density_rule="uniform", eps_rule="zero")).stats
    assert float(uniform.cv[0, 0]) == 1.0
    assert float(uniform.eps[0, 0]) == 0.0


def test_zero_width_box_is_a_point_mass() -> None:
    # every estimation shift is -0.5: certified iff rho - 0.5 > 0 (and eps < phi)
    table = _with_estimation_shifts([0.6, 0.4], [-0.5] * 20, k=40)
    cert = ct.certify(table, FREE)
    assert cert.certified_h.tolist() == [True, False]
    assert cert.certified_c.tolist() == [True, False]


def test_multiclass_needs_every_competitor() -> None:
    # gold 0; competitor 1 far behind, competitor 2 level with gold -> never certified
    k = 40
    rng = np.random.default_rng(0)
    clean = [[0.0, -50.0, -0.1], [0.0, -50.0, -50.0]]
    variants = {
        e: [[0.0, c[1] + rng.normal(0, 0.1), c[2] + rng.normal(0, 0.1)] for _ in range(k)]
        for e, c in enumerate(clean)
    }
    cert = ct.certify(MarginTable.from_items(_table(clean, [0, 0], variants)), FREE)
    assert cert.certified_h.tolist() == [False, True]
    assert cert.certified_c.tolist() == [False, True]
    # phi_j = phi / (Q - 1): with 20 estimation variants eps = 1/21 < 0.05 is still possible
    assert cert.possible_h.all()


def test_too_few_variants_is_nan_with_a_note() -> None:
    table = _with_estimation_shifts([5.0, 6.0], [0.0] * 5, k=10)  # n = 5: eps = 1/6 > 0.1
    cert = ct.certify(table, FREE)
    assert math.isnan(cert.p_h) and math.isnan(cert.P_c)
    assert "estimation variants" in cert.note and "K >= 19" in cert.note
    zero = ct.certify(table, CertConfig(eps_rule="zero", density_rule="histogram"))
    assert zero.p_h == 100.0  # the paper's plug-in reading certifies them


# ----------------------------------------------------------------------------- split, items


def test_estimation_split_is_deterministic_half_and_order_free() -> None:
    # one table per variant count: metrics use complete examples only (same rounds for all)
    for k in (9, 10, 11):
        items = _table([[0.0, -1.0]] * 3, [0, 0, 1], {e: [[0.0, -1.0]] * k for e in range(3)})
        a = MarginTable.from_items(items)
        shuffled = list(items)
        random.Random(1).shuffle(shuffled)
        b = MarginTable.from_items(shuffled)
        ma, mb = margins.estimation_mask(a, 0), margins.estimation_mask(b, 0)
        np.testing.assert_array_equal(ma, mb)
        for e in range(3):
            assert ma[a.var_example == e].sum() == (k + 1) // 2
        assert not np.array_equal(ma, margins.estimation_mask(a, 1))


def test_aggregations_are_order_free_and_dedupe() -> None:
    rng = np.random.default_rng(3)
    clean = [[0.0, -float(r)] for r in rng.uniform(0, 4, 12)]
    variants = {
        e: [[0.0, c[1] + rng.normal(0, 0.3)] for _ in range(30)] for e, c in enumerate(clean)
    }
    items = _table(clean, [0] * 12, variants)
    shuffled = items * 2
    random.Random(0).shuffle(shuffled)
    for fn in (harness.p_cert_h, harness.p_cert_c, harness.pop_cert_h, harness.pop_cert_c):
        assert fn(shuffled) == fn(items)
    assert 0.0 < harness.p_cert_c(items) <= 1.0  # a fraction, and some examples certify
    assert math.isnan(harness.p_cert_h([]))
    no_clean = [it for it in items if it["pert_id"] > 0]
    assert math.isnan(harness.p_cert_h(no_clean))


def test_verification_by_hand() -> None:
    table = _with_estimation_shifts([2.5, 0.5], [-1.0, 0.0, 1.0, 3.0], k=8)
    # flip the verification variants of example 1 (uncertified) to wrong: ll[1] > ll[0]
    est = margins.estimation_mask(table, 0)
    var_ll = table.var_ll.copy()
    var_ll[(table.var_example == 1) & ~est] = [0.0, 1.0]
    t2 = MarginTable(
        table.example_ids,
        table.gold,
        table.clean_ll,
        table.has_clean,
        table.var_example,
        table.var_pert_id,
        var_ll,
    )
    cert = ct.certify(t2, CertConfig(phi=0.5))
    assert cert.certified_h.tolist() == [True, False]
    v = checks.verification(cert, "h")
    assert (v.bac_certified, v.bac_uncertified) == (1.0, 0.0)
    assert (v.n_certified, v.n_uncertified) == (1, 1)
    assert (v.n_variants_certified, v.n_variants_uncertified) == (4, 4)


# ------------------------------------------------------------------------------ Monte Carlo


def _linear_world(noise: str, seed: int) -> tuple[MarginTable, np.ndarray, np.ndarray]:
    """A linear classifier on x in R^5 with 3 classes; 300 examples x 40 perturbed variants.

    Returns the table, and per example 400 fresh perturbed predictions and the gold labels.
    """
    rng = np.random.default_rng(seed)
    n_ex, k, d, q = 300, 40, 5, 3
    w = rng.normal(size=(q, d))
    x = rng.normal(size=(n_ex, d)) * 1.5
    gold = np.argmax(x @ w.T, axis=1)

    def draw(m: int) -> np.ndarray:
        if noise == "gauss":
            return rng.normal(size=(n_ex, m, d)) * 0.4
        return rng.uniform(-0.6, 0.6, size=(n_ex, m, d)) + 0.2  # bounded and biased

    var = (x[:, None, :] + draw(k)) @ w.T
    table = MarginTable(
        example_ids=np.array([f"x{i:03d}" for i in range(n_ex)], dtype=object),
        gold=gold,
        clean_ll=x @ w.T,
        has_clean=np.ones(n_ex, dtype=bool),
        var_example=np.repeat(np.arange(n_ex), k),
        var_pert_id=np.tile(np.arange(1, k + 1), n_ex),
        var_ll=var.reshape(-1, q),
    )
    fresh_pred = np.argmax((x[:, None, :] + draw(400)) @ w.T, axis=2)
    return table, fresh_pred, gold


@pytest.mark.parametrize("noise", ["gauss", "uniform"])
def test_certified_examples_fail_at_most_phi_on_fresh_variants(noise: str) -> None:
    phi = 0.2  # 3 classes: phi_j = 0.1 > eps = 1/21 with 20 estimation variants
    table, fresh_pred, gold = _linear_world(noise, seed=7)
    for cfg in (CertConfig(phi=phi), CertConfig(phi=phi, chebyshev="empirical")):
        cert = ct.certify(table, cfg)
        wrong = fresh_pred != gold[:, None]
        for flags in (cert.certified_h, cert.certified_c):
            assert 0 < flags.sum() < len(flags)  # the test has teeth
            assert wrong[flags].mean() <= phi
            # per example too, up to Monte Carlo error of 400 draws
            assert wrong[flags].mean(axis=1).max() <= phi + 3 * math.sqrt(phi * (1 - phi) / 400)
        # and the verification half of certified examples is nearly always right
        v = checks.verification(cert, "h")
        assert v.acc_certified >= 1 - phi


def test_paper_estimator_by_hand() -> None:
    """One binary example, clean margin 1, estimation shifts {-0.5, 0.3}: the paper's reading."""
    items = [{"task": "t", "example_id": "e", "pert_id": 0, "gold": 0, "ll": [0.0, -1.0]}]
    # margins of the variants: 1 + shift; pick pert ids so both fall in the estimation half
    shifts = {}
    for pid in range(1, 40):
        shifts[pid] = [-0.5, 0.3][pid % 2]
    for pid, z in shifts.items():
        items.append(
            {"task": "t", "example_id": "e", "pert_id": pid, "gold": 0, "ll": [0.0, -(1 + z)]}
        )
    table = MarginTable.from_items(items)
    cfg = CertConfig.named("paper", phi=0.1)
    cert = ct.certify(table, cfg)
    st = cert.stats
    low, high = st.low[0, 0], st.high[0, 0]
    assert (low, high) == pytest.approx((-0.5, 0.3))
    assert st.eps[0, 0] == 0.0 and st.cv[0, 0] == 1.0
    kap = math.log(1.0 / 0.1)  # C V_B = 1, eps_B = 0, phi_j = phi (binary)
    c = 0.4
    mu = -0.1
    nu = 0.8**2 / 12
    xi_h = c * math.sqrt(2 * kap)
    gamma = 2 / 3 * c * kap
    xi_b = gamma + math.sqrt(gamma**2 + 2 * kap * nu)
    cantelli = math.sqrt(nu * (math.exp(kap) - 1))
    assert ct.hoeffding_bernstein_threshold(c, nu, kap) == pytest.approx(min(xi_h, xi_b))
    assert ct.cantelli_threshold(nu, kap) == pytest.approx(cantelli)
    assert bool(cert.certified_h[0]) == (1.0 > -mu + min(xi_h, xi_b))
    assert bool(cert.certified_c[0]) == (1.0 > -mu + cantelli)
    # by hand: xi_H = 0.4 * sqrt(2 ln 10) = 0.858 -> 1 > 0.958: certified; Cantelli 0.693
    assert cert.certified_h[0] and cert.certified_c[0]
    # the distribution-free estimator needs eps_B = 1/(n+1) < 0.1: here n = 20, so it can run
    free = ct.certify(table, CertConfig.named("distribution_free", phi=0.1))
    assert free.stats.eps[0, 0] == pytest.approx(1 / 21)


def test_certificate_checks_report_both_estimators() -> None:
    rng = np.random.default_rng(3)
    items = []
    for e in range(12):
        m = rng.normal(1.0, 1.0)
        items.append({"task": "t", "example_id": f"e{e}", "pert_id": 0, "gold": 0, "ll": [0.0, -m]})
        for pid in range(1, 41):
            z = rng.normal(-0.2, 0.3)
            items.append(
                {
                    "task": "t",
                    "example_id": f"e{e}",
                    "pert_id": pid,
                    "gold": 0,
                    "ll": [0.0, -(m + z)],
                }
            )
    found = checks.certificate_checks(MarginTable.from_items(items), phi=0.1)
    names = {(c.estimator, c.rule) for c in found}
    assert ("paper", "c") in names and ("paper", "h") in names
    assert ("distribution_free", "h") in names
    for c in found:
        if c.n_certified:
            # certified examples hold on their held-back variants in this clean setting
            assert c.acc_certified >= 0.9 and not c.flagged
            assert c.worst_certified <= c.acc_certified


def test_certificate_na_is_explained_once(caplog: pytest.LogCaptureFixture) -> None:
    from lm_eval_robust.stats import certify

    items = []
    for ex in range(4):
        for pert in range(3):  # K = 2: one estimation shift each, no box
            items.append(
                {
                    "task": "ni999_format_pert",
                    "example_id": f"e{ex}",
                    "pert_id": pert,
                    "gold": ex % 2,
                    "pred": ex % 2,
                    "tied": False,
                    "margin": 1.0,
                    "ll": [0.0, -1.0 - pert] if ex % 2 == 0 else [-1.0 - pert, 0.0],
                }
            )
    certify._explained.clear()
    with caplog.at_level(logging.WARNING, logger="lm_eval_robust.stats.certify"):
        for fn in (certify.p_cert_h, certify.p_cert_c, certify.pop_cert_h, certify.pop_cert_c):
            assert fn(items) != fn(items)  # NaN
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("ni999_format_pert: p_cert_h, p_cert_c, pop_cert_h, pop_cert_c")
    assert "not computable" in lines[0] or "need at least" in lines[0]
