"""One balanced accuracy: every vectorised BAC of the package agrees with
:func:`lm_eval_robust.stats.classification.balanced_accuracy`."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lm_eval_robust.stats.bootstrap import bac_from_counts
from lm_eval_robust.stats.classification import balanced_accuracy, balanced_accuracy_of_credit
from lm_eval_robust.stats.fit.constant import _bac_curve
from lm_eval_robust.values.ties import pred_shares, tie_credit


def test_definition_on_small_cases() -> None:
    assert balanced_accuracy([0, 0, 0, 1], [0, 0, 0, 0]) == pytest.approx(0.5)
    assert balanced_accuracy([0, 1, 1, 2], [0, 1, 0, 1]) == pytest.approx((1 + 0.5 + 0) / 3)
    assert math.isnan(balanced_accuracy([], []))
    # a two-way tie of the top scores gives the gold label half a prediction
    ll = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert balanced_accuracy([0, 0, 1], pred_shares(ll)) == pytest.approx((0.75 + 1.0) / 2)


@pytest.mark.parametrize("seed", range(5))
def test_credit_and_counts_agree_with_the_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    q = int(rng.integers(2, 5))
    gold = rng.integers(0, q, 200)
    ll = np.round(rng.normal(size=(200, q)), 1)  # coarse scores: many exact ties
    want = balanced_accuracy(gold, pred_shares(ll))
    credit = tie_credit(ll, gold)
    assert balanced_accuracy_of_credit(gold, credit) == pytest.approx(want, abs=1e-15)
    onehot = np.eye(q)[gold]
    counts = bac_from_counts(credit @ onehot, onehot.sum(axis=0))
    assert float(counts) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_constant_search_curve_agrees_with_the_definition(seed: int) -> None:
    """Binary: "predict 1 iff z − b > 0" over a grid is the BAC of logits [0, z − b]."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=300)
    y = (rng.random(300) < 0.3).astype(np.int64)
    grid = np.linspace(-2, 2, 41)
    curve = _bac_curve(z, y, grid)
    for b, got in zip(grid, curve, strict=True):
        logits = np.stack([np.zeros_like(z), z - b], axis=1)
        assert got == pytest.approx(balanced_accuracy(y, pred_shares(logits)), abs=1e-12)
