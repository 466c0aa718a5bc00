"""The clean-calibrated reference offset (fit --method clean_calibration)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.stats.classification import balanced_accuracy
from lm_eval_robust.stats.fit.clean_cal import clean_offset
from lm_eval_robust.values.ties import pred_shares


def _bac(logits: np.ndarray, gold: np.ndarray, beta: np.ndarray) -> float:
    return balanced_accuracy(gold, pred_shares(logits - beta))


def test_binary_offset_is_the_best_threshold() -> None:
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 2, 60)
    # a model whose margin ranks the examples but whose threshold is far off: label 0 always wins
    margin = 1.5 * gold + rng.normal(0, 0.5, 60) - 6.0
    logits = np.stack([np.zeros(60), margin], axis=1)
    assert _bac(logits, gold, np.zeros(2)) == pytest.approx(0.5)
    beta = clean_offset(logits, gold)
    assert beta[0] == 0.0
    best = _bac(logits, gold, beta)
    # exhaustive check over every threshold between sorted margins
    m = np.sort(margin)
    grid = np.concatenate([[m[0] - 1], (m[1:] + m[:-1]) / 2, [m[-1] + 1]])
    assert best == pytest.approx(max(_bac(logits, gold, np.array([0.0, t])) for t in grid))
    assert best > 0.8


def test_no_change_when_nothing_helps() -> None:
    logits = np.array([[2.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, 1.0]])
    gold = np.array([0, 1, 0, 1])
    np.testing.assert_array_equal(clean_offset(logits, gold), np.zeros(2))


def test_multiclass_offset_beats_grid_search_start_and_is_a_local_optimum() -> None:
    rng = np.random.default_rng(1)
    n, d = 90, 3
    gold = rng.integers(0, d, n)
    logits = rng.normal(0, 1, (n, d))
    logits[np.arange(n), gold] += 1.0
    logits[:, 2] += 3.0  # label 2 takes nearly every prediction
    base = _bac(logits, gold, np.zeros(d))
    beta = clean_offset(logits, gold)
    found = _bac(logits, gold, beta)
    assert found > base + 0.15
    # no coarse grid point around the solution improves on it
    for dx, dy in itertools.product(np.linspace(-1, 1, 9), repeat=2):
        trial = beta + np.array([0.0, dx, dy])
        assert _bac(logits, gold, trial) <= found + 1e-12


@pytest.mark.parametrize(
    ("logits", "gold", "needle"),
    [
        (np.zeros((3,)), np.zeros(3, dtype=int), "logits"),
        (np.zeros((3, 2)), np.zeros(2, dtype=int), "gold"),
        (np.zeros((0, 2)), np.zeros(0, dtype=int), "clean train rows"),
        (np.array([[np.nan, 0.0]]), np.zeros(1, dtype=int), "NaN"),
    ],
)
def test_bad_inputs_say_what_is_wrong(logits: np.ndarray, gold: np.ndarray, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        clean_offset(logits, gold)
