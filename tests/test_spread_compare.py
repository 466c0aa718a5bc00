"""Spread against its permutation null; paired model differences; exact paired tests."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lm_eval_robust.report.compare import compare_models, holm, subset_table
from lm_eval_robust.stats.paired_tests import mcnemar_exact, paired_permutation
from lm_eval_robust.stats.robustness import RobustTable
from lm_eval_robust.stats.spread_null import mean_null, noise_spread, spread_null


def _items(n: int, effect: float, skill: float, seed: int, task: str = "t") -> list[dict]:
    """``n`` binary examples x (clean + formats f0..f3); format f3 costs ``effect`` margin."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n):
        gold = e % 2
        base = skill + rng.normal()
        for pid in range(5):
            fmt = "clean" if pid == 0 else f"f{pid - 1}"
            m = base + 0.7 * rng.normal() - (effect if fmt == "f3" else 0.0)
            ll = [0.0, 0.0]
            ll[1 - gold] = -m
            out.append(
                {"task": task, "example_id": f"e{e:03d}", "pert_id": pid, "gold": gold,
                 "ll": ll, "variant": None if pid == 0 else fmt}
            )  # fmt: skip
    return out


def test_spread_within_noise_without_effect() -> None:
    null = spread_null(_items(10, 0.0, 0.8, 0), n_permutations=500)
    assert null.observed[3] > 0  # the spread is positive with no effect at all
    assert null.p_value() >= 0.05 and null.as_dict()["spread_within_noise"]
    assert null.null_mean() > 0.05


def test_spread_above_noise_with_effect() -> None:
    null = spread_null(_items(80, 3.0, 1.5, 1), n_permutations=500)
    assert null.p_value() < 0.01 and null.p_value("fmt_worst") < 0.01
    assert null.excess > 0.2 and not null.as_dict()["spread_within_noise"]


def test_null_keeps_each_examples_answers() -> None:
    """Permuting labels within examples keeps every example's right answers: the mean over
    variants of the variant accuracies is the same in every draw when classes are balanced."""
    items = _items(12, 1.0, 0.5, 2)
    null = spread_null(items, n_permutations=50)
    assert np.isfinite(null.null).all()
    both = mean_null([null, spread_null(_items(12, 0.0, 0.5, 3), n_permutations=50)])
    assert both.null.shape == (50, 4)
    assert both.observed[3] == pytest.approx(
        (null.observed[3] + spread_null(_items(12, 0.0, 0.5, 3), 10).observed[3]) / 2
    )


def test_noise_spread_shrinks_with_size() -> None:
    small, small_q = noise_spread(10, 4)
    big, big_q = noise_spread(160, 4)
    assert small > 2 * big and small_q > small and big_q > big
    # 10 examples x 4 variants at 70 %: about 0.3 of spread from noise alone
    assert 0.2 < small < 0.4


def _tables(skill: float, effect: float, seed: int) -> dict[str, RobustTable]:
    return {
        task: RobustTable.from_items(_items(30, effect, skill, seed + i, task))
        for i, task in enumerate(("ni065", "ni220"))
    }


def test_compare_models_paired_and_ranked() -> None:
    tables = {
        ("robust", "format"): _tables(2.0, 0.0, 10),
        ("fragile", "format"): _tables(2.0, 4.0, 20),
        ("fragile2", "format"): _tables(2.0, 4.0, 30),
    }
    comp = compare_models(tables, ["robust", "fragile", "fragile2"], n_resamples=400)
    drop = {(p.model_a, p.model_b): p for p in comp.pairs if p.measure == "bac_worst"}
    rf = drop[("robust", "fragile")]
    assert rf.diff > 0 and rf.low > 0 and rf.distinguishable and rf.p_holm >= rf.p
    ff = drop[("fragile", "fragile2")]
    assert not ff.distinguishable
    ranks = {r.model: r for r in comp.ranks if r.measure == "bac_worst"}
    assert (ranks["robust"].low, ranks["robust"].high) == (1, 1)
    assert ranks["fragile"].low == 2 and ranks["fragile"].high == 3


def test_subset_and_holm() -> None:
    t = RobustTable.from_items(_items(6, 0.0, 1.0, 0))
    sub = subset_table(t, ["e004", "e001"])
    assert sub.example_ids == ("e004", "e001") and sub.var_credit.shape[0] == 2
    assert holm([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(holm([math.nan, 0.2])[0])


def test_exact_paired_tests() -> None:
    # 6 answers broken, 1 fixed: exact McNemar p = 2 * P(Bin(7, 1/2) <= 1) = 0.125
    before = np.array([1] * 6 + [0] + [1] * 20, dtype=bool)
    after = np.array([0] * 6 + [1] + [1] * 20, dtype=bool)
    t = mcnemar_exact(before, after)
    assert (t.b, t.c, t.n_discordant) == (6, 1, 7)
    assert t.p == pytest.approx(0.125) and not t.distinguishable()
    assert mcnemar_exact(np.ones(20, bool), np.zeros(20, bool)).p < 1e-5
    perm = paired_permutation(before.astype(float), after.astype(float))
    assert perm.p == pytest.approx(0.125)  # the sign-flip test on 0/1 scores is McNemar's
