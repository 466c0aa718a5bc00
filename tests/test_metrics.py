"""Aggregations: balanced accuracy and drops against hand-computed values, order-free."""

from __future__ import annotations

import math
import random

import pytest

from lm_eval_robust.stats import classification as m


def _item(ex: int, pert: int, gold: int, pred: int) -> dict:
    return {"task": "t", "example_id": str(ex), "pert_id": pert, "gold": gold, "pred": pred}


ITEMS = [
    # clean: class 0 recall 2/2, class 1 recall 1/2 -> BAC 0.75, acc 3/4
    _item(0, 0, 0, 0),
    _item(1, 0, 0, 0),
    _item(2, 0, 1, 1),
    _item(3, 0, 1, 0),
    # perturbed: class 0 recall 1/2, class 1 recall 0/2 -> BAC 0.25, acc 1/4
    _item(0, 1, 0, 0),
    _item(1, 1, 0, 1),
    _item(2, 1, 1, 0),
    _item(3, 1, 1, 0),
]


def test_values_by_hand() -> None:
    assert m.bac_clean(ITEMS) == pytest.approx(0.75)
    assert m.bac_pert(ITEMS) == pytest.approx(0.25)
    assert m.delta_drop(ITEMS) == pytest.approx(-0.5)
    assert m.acc_clean(ITEMS) == pytest.approx(0.75)
    assert m.acc_pert(ITEMS) == pytest.approx(0.25)
    assert m.maj_share_clean(ITEMS) == pytest.approx(0.75)
    assert m.maj_share_pert(ITEMS) == pytest.approx(0.75)


def test_order_and_duplicates_do_not_matter() -> None:
    shuffled = ITEMS * 2
    random.Random(0).shuffle(shuffled)
    assert m.bac_pert(shuffled) == m.bac_pert(ITEMS)
    assert m.delta_drop(shuffled) == m.delta_drop(ITEMS)


def test_empty_is_nan() -> None:
    clean_only = [i for i in ITEMS if i["pert_id"] == 0]
    assert math.isnan(m.bac_pert(clean_only))
    assert math.isnan(m.delta_drop(clean_only))


def test_margin_auc() -> None:
    items = [
        {**_item(i, 0, g, 0), "ll": [0.0, s]}
        for i, (g, s) in enumerate([(0, -2.0), (0, 0.5), (1, 1.0), (1, 3.0)])
    ]
    assert m.auc_clean(items) == pytest.approx(1.0)  # margins rank the classes perfectly
    items[1]["ll"] = [0.0, 2.0]  # one negative now outranks one positive: 3 of 4 pairs right
    assert m.auc_clean(items) == pytest.approx(0.75)
    three = [{**_item(i, 1, i % 3, 0), "ll": [0.0, 0.0, 0.0]} for i in range(6)]
    for it in three:
        it["ll"][it["gold"]] = 1.0
    assert m.auc_pert(three) == pytest.approx(1.0)
