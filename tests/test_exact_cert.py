"""The finite-sample certificate keeps its promise at every K the tool allows it at."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from lm_eval_robust.stats.cert_splits import split_flags, summarize
from lm_eval_robust.stats.exact_cert import (
    ExactConfig,
    benjamini_hochberg,
    binomial_pvalues,
    certify_counts,
    clopper_pearson_lower,
    min_k,
    min_variants,
)
from lm_eval_robust.stats.margins import MarginTable

PHI, ALPHA = 0.1, 0.05
#: true accuracies of the simulated examples: several just below 1 - phi, where a wrong
#: certificate is likeliest
MIX = np.array([0.5, 0.8, 0.88, 0.895, 0.899, 0.9, 0.93, 0.97, 0.99, 1.0])


def test_smallest_size() -> None:
    n = min_variants(PHI, ALPHA)
    assert n == 29 and 0.9**29 <= ALPHA < 0.9**28
    assert min_k(PHI, ALPHA) == 57
    # below it, even all variants right certify nothing; at it, they do
    assert not certify_counts(np.array([n - 1]), np.array([n - 1]), ExactConfig()).any()
    assert certify_counts(np.array([n]), np.array([n]), ExactConfig(control="each")).all()


def test_pvalue_is_the_clopper_pearson_bound() -> None:
    for n in (1, 5, 29, 60, 100):
        s = np.arange(n + 1)
        by_p = binomial_pvalues(s, np.full(n + 1, n), PHI) <= ALPHA
        by_cp = clopper_pearson_lower(s, np.full(n + 1, n), ALPHA) >= 1 - PHI - 1e-12
        assert (by_p == by_cp).all(), n


def test_benjamini_hochberg_step_up() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.5])
    # sorted 0.01 <= .0125, 0.03 <= .025? no, 0.04 <= .0375? no -> only the first
    assert benjamini_hochberg(p, 0.05).tolist() == [True, False, False, False]
    assert benjamini_hochberg(np.array([0.01, 0.02, 0.03, 0.04]), 0.05).all()


@pytest.mark.slow
@pytest.mark.parametrize("control", ["share", "each"])
def test_valid_at_every_k(control: str) -> None:
    """Every K from 2 to 200, and 300, 500, 1000: below min_k nothing is certified; from it on,
    the certified examples' true accuracy is >= 1 - phi in at least the promised share
    (1 - alpha, on average over replications), and an example just below 1 - phi is certified
    with probability <= alpha."""
    cfg = ExactConfig(PHI, ALPHA, control)  # type: ignore[arg-type]
    rng = np.random.default_rng(11)
    reps, e = 300, 40
    acc = np.resize(MIX, e)
    bad = acc < 1 - PHI
    tol = 4 * math.sqrt(ALPHA * (1 - ALPHA) / reps)
    checked = 0
    for k in [*range(2, 201), 300, 500, 1000]:
        n = (k + 1) // 2
        succ = rng.binomial(n, acc, size=(reps, e))
        cert = np.array([certify_counts(s, np.full(e, n), cfg) for s in succ])
        if k < cfg.min_k:
            assert not cert.any(), k
            continue
        checked += 1
        n_cert = cert.sum(axis=1)
        wrong_share = np.where(n_cert > 0, (cert & bad).sum(axis=1) / np.maximum(n_cert, 1), 0)
        if control == "share":
            assert wrong_share.mean() <= ALPHA + tol, (k, wrong_share.mean())
        per_example = cert[:, bad].mean(axis=0)
        assert per_example.max() <= ALPHA + 2 * tol, (k, per_example.max())
    assert checked == 200 - cfg.min_k + 1 + 3


@pytest.mark.slow
def test_global_null_at_every_allowed_k() -> None:
    """Every example just below 1 - phi: any certificate is wrong; P(any) <= alpha."""
    cfg = ExactConfig(PHI, ALPHA)
    rng = np.random.default_rng(3)
    reps, e = 2000, 20
    tol = 4 * math.sqrt(ALPHA * (1 - ALPHA) / reps)
    for k in range(cfg.min_k, 201, 7):
        n = (k + 1) // 2
        succ = rng.binomial(n, 1 - PHI - 1e-3, size=(reps, e))
        any_cert = np.array([certify_counts(s, np.full(e, n), cfg).any() for s in succ])
        assert any_cert.mean() <= ALPHA + tol, (k, any_cert.mean())


def _world(acc: np.ndarray, k: int, seed: int) -> MarginTable:
    """Binary examples whose variants are right with probability ``acc`` (margin + N(0,1))."""
    rng = np.random.default_rng(seed)
    rho = norm.ppf(np.clip(acc, 1e-6, 1 - 1e-9))
    e = acc.size
    z = rng.normal(size=(e, k))
    var_ll = np.zeros((e * k, 2))
    var_ll[:, 1] = -(rho[:, None] + z).ravel()
    clean = np.zeros((e, 2))
    clean[:, 1] = -rho
    return MarginTable(
        example_ids=np.array([f"e{i:03d}" for i in range(e)], dtype=object),
        gold=np.zeros(e, dtype=np.int64),
        clean_ll=clean,
        has_clean=np.ones(e, dtype=bool),
        var_example=np.repeat(np.arange(e), k),
        var_pert_id=np.tile(np.arange(1, k + 1), e),
        var_ll=var_ll,
    )


def test_splits_na_below_min_k_and_valid_above() -> None:
    acc = np.resize(MIX, 30)
    small = split_flags(_world(acc, 20, 0), n_splits=5)
    assert not small["exact"].available and "K >= 57" in small["exact"].reason
    s = summarize([small["exact"]], phi=PHI, n_resamples=50)
    assert math.isnan(s.rate) and "K >= 57" in s.reason
    assert small["plugin_c"].available  # the plug-in is computed, labelled with its K
    assert summarize([small["plugin_c"]], n_resamples=50).label == "plug-in p_C, K = 20"
    wrong = certified = 0
    for seed in range(6):
        flags = split_flags(_world(acc, 200, seed), n_splits=5)["exact"]
        assert flags.available
        certified += int(flags.certified.sum())
        wrong += int((flags.certified & (acc < 1 - PHI)[None, :]).sum())
    assert certified > 0 and wrong / certified <= ALPHA + 0.05


def test_plugin_fails_its_promise_at_small_k() -> None:
    """The paper's plug-in at K = 4 certifies examples far below 1 - phi (why it is labelled
    a plug-in estimate and not published as a certificate)."""
    acc = np.full(200, 0.7)
    flags = split_flags(_world(acc, 4, 1), n_splits=3)["plugin_c"]
    assert flags.certified.mean() > 0.2
    summary = summarize([flags], phi=PHI, n_resamples=200)
    assert summary.flagged and summary.share_below > 0.3


def test_check_sees_selection() -> None:
    acc = np.concatenate([np.full(20, 1.0), np.full(20, 0.6)])
    summary = summarize([split_flags(_world(acc, 100, 2), n_splits=10)["exact"]], n_resamples=300)
    assert summary.selects and not summary.flagged
    assert summary.rate == pytest.approx(0.5, abs=0.05)
    assert summary.rate_low <= summary.rate <= summary.rate_high
    assert summary.share_below < 0.05


def _items(k: int, margin: float = 3.0) -> list[dict]:
    """8 binary examples, clean + ``k`` variants, every variant right by ``margin``."""
    out = []
    for e in range(8):
        gold = e % 2
        for pid in range(k + 1):
            ll = [0.0, 0.0]
            ll[1 - gold] = -margin
            out.append({"task": "t", "example_id": f"e{e}", "pert_id": pid, "gold": gold, "ll": ll})
    return out


def test_harness_metric_is_nan_below_min_k_and_counts_above(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from lm_eval_robust.stats.certify import p_cert_exact

    with caplog.at_level("WARNING"):
        assert math.isnan(p_cert_exact(_items(20)))
    assert "K >= 57" in caplog.text
    assert p_cert_exact(_items(60)) == 1.0  # 30 of 30 right: p = 0.9^30 < 0.05
    assert p_cert_exact(_items(60, margin=-3.0)) == 0.0
