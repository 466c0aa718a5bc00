"""Clustered BCa bootstrap: parity with scipy on identical resamples, clustering, pairing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import bootstrap

from lm_eval_robust.stats import bootstrap as bs


def _counts(seed: int, g: int = 15) -> np.ndarray:
    """Per-cluster [correct_0, total_0, correct_1, total_1] with both classes in every cluster."""
    rng = np.random.default_rng(seed)
    t0 = rng.integers(3, 9, g)
    t1 = rng.integers(3, 9, g)
    return np.stack([rng.binomial(t0, 0.8), t0, rng.binomial(t1, 0.6), t1], axis=1).astype(float)


def _bac_of_totals(t: np.ndarray) -> np.ndarray:
    return bs.bac_from_counts(t[..., [0, 2]], t[..., [1, 3]])


@pytest.mark.parametrize("chunk", [None, 250])
def test_bca_equals_scipy_on_identical_resamples(chunk: int | None) -> None:
    s = _counts(0)
    n_res = 999
    ours = bs.cluster_bootstrap_ci(
        bs.linear_stat(s, _bac_of_totals), len(s), n_resamples=n_res, seed=42, chunk=chunk
    )

    def stat(c0, n0, c1, n1, axis=-1):  # type: ignore[no-untyped-def]
        return 0.5 * (c0.sum(axis) / n0.sum(axis) + c1.sum(axis) / n1.sum(axis))

    ref = bootstrap(
        tuple(s.T),
        stat,
        paired=True,
        vectorized=True,
        n_resamples=n_res,
        batch=chunk,
        method="BCa",
        rng=np.random.default_rng(42),
    )
    assert ours.estimate[0] == pytest.approx(stat(*s.T))
    assert ours.low[0] == pytest.approx(ref.confidence_interval.low, rel=1e-12)
    assert ours.high[0] == pytest.approx(ref.confidence_interval.high, rel=1e-12)
    assert ours.low[0] < ours.estimate[0] < ours.high[0]


def test_chunking_does_not_change_the_resamples() -> None:
    s = _counts(1, g=40)
    fn = bs.linear_stat(s, _bac_of_totals)
    a = bs.cluster_bootstrap_ci(fn, len(s), n_resamples=500, seed=3, chunk=7)
    b = bs.cluster_bootstrap_ci(fn, len(s), n_resamples=500, seed=3, max_elements=10_000_000)
    np.testing.assert_allclose([a.low, a.high], [b.low, b.high], rtol=1e-12)


def test_weights_are_cluster_counts() -> None:
    (w,) = list(bs.resample_weights(6, 4, np.random.default_rng(0)))
    assert w.shape == (4, 6)
    np.testing.assert_array_equal(w.sum(axis=1), 6)
    jk = np.concatenate(list(bs.jackknife_weights(5, chunk=2)))
    np.testing.assert_array_equal(jk, 1 - np.eye(5))


def test_clustered_interval_is_wider_when_variants_are_correlated() -> None:
    rng = np.random.default_rng(5)
    g, k = 40, 20
    p_example = rng.beta(0.7, 0.5, g)  # strong per-example effect: variants move together
    correct = rng.binomial(1, np.repeat(p_example, k)).astype(float)

    def mean_stat(t: np.ndarray) -> np.ndarray:
        return t[:, 0] / t[:, 1]

    per_cluster = np.stack([correct.reshape(g, k).sum(1), np.full(g, k)], axis=1)
    clustered = bs.cluster_bootstrap_ci(
        bs.linear_stat(per_cluster, mean_stat), g, n_resamples=2000, seed=0
    )
    per_doc = np.stack([correct, np.ones_like(correct)], axis=1)
    naive = bs.cluster_bootstrap_ci(
        bs.linear_stat(per_doc, mean_stat), g * k, n_resamples=2000, seed=0
    )
    assert clustered.estimate[0] == pytest.approx(naive.estimate[0])
    width_c = clustered.high[0] - clustered.low[0]
    width_n = naive.high[0] - naive.low[0]
    assert width_c > 2 * width_n


def test_paired_delta_uses_the_same_clusters() -> None:
    s = _counts(2, g=30)
    both = np.hstack([s, s])  # a run compared with itself

    def delta(t: np.ndarray) -> np.ndarray:
        return np.stack(
            [_bac_of_totals(t[:, 4:]) - _bac_of_totals(t[:, :4]), _bac_of_totals(t[:, :4])], 1
        )

    ci = bs.cluster_bootstrap_ci(bs.linear_stat(both, delta), 30, n_resamples=300, seed=0)
    assert ci.estimate[0] == 0.0
    assert ci.degenerate[0] and math.isnan(ci.low[0])  # identical in every resample
    assert not ci.degenerate[1] and ci.low[1] < ci.estimate[1] < ci.high[1]


def test_undefined_resamples_give_no_interval() -> None:
    # a ratio whose denominator is zero in most resamples
    s = np.array([[1.0, 1.0]] + [[0.0, 0.0]] * 9)
    ci = bs.cluster_bootstrap_ci(
        bs.linear_stat(s, lambda t: t[:, 0] / np.where(t[:, 1] > 0, t[:, 1], np.nan)),
        10,
        n_resamples=200,
        seed=0,
    )
    assert ci.invalid[0] > 2 and math.isnan(ci.low[0])


def test_bac_from_counts_matches_sklearn() -> None:
    from sklearn.metrics import balanced_accuracy_score

    gold = np.array([0, 0, 1, 1, 1, 2])
    pred = np.array([0, 1, 1, 1, 0, 0])
    total = np.bincount(gold, minlength=4)  # class 3 absent: left out, as sklearn
    correct = np.bincount(gold[gold == pred], minlength=4)
    assert float(bs.bac_from_counts(correct, total)) == pytest.approx(
        balanced_accuracy_score(gold, pred)
    )


def test_task_level_ci() -> None:
    vals = [10.0, 12.0, 8.0, 15.0, 11.0, np.nan]
    res = bs.task_level_ci(vals, n_resamples=2000)
    assert res.n_tasks == 5 and res.mean == pytest.approx(11.2)
    assert res.low < res.mean < res.high
    ref = bootstrap(
        (np.array(vals[:5]),),
        np.mean,
        n_resamples=2000,
        method="BCa",
        rng=np.random.default_rng(0),
    )
    assert res.low == pytest.approx(ref.confidence_interval.low)
    flat = bs.task_level_ci([0.0, 0.0, 0.0])
    assert flat.mean == 0.0 and math.isnan(flat.low) and flat.note == "all tasks equal"
    assert bs.task_level_ci([1.0, 2.0]).note == "fewer than 3 tasks"
