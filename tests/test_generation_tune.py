"""k and λ of a layer fit chosen by held-out generation score (scoring/generation/tune.py).

The generation score is a callback; here a synthetic one: a prompt's answer is right when its
(corrected) state lies within 0.5 of its clean state along the perturbation's direction.
"""

from __future__ import annotations

import numpy as np
import pytest

from lm_eval_robust.scoring.correction import CorrectionError
from lm_eval_robust.scoring.generation.fit import LayerCorrection
from lm_eval_robust.scoring.generation.tune import GenTuneSettings, tune_by_generation

N = 6


def _states(n_examples: int = 18, k: int = 3, seed: int = 0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    xc = rng.normal(size=(n_examples, N))
    xc[:, 1] = 0.0  # axis 1 reads the perturbation: 0 on clean prompts
    xp, pair, groups = [], [], []
    for e in range(n_examples):
        for _ in range(k):
            s = rng.uniform(1.0, 3.0)  # a shift along axis 0, read from axis 1
            x = xc[e].copy()
            x[0] += s
            x[1] = s
            x[2:] += rng.normal(0.0, 0.01, size=N - 2)
            xp.append(x)
            pair.append(e)
            groups.append(f"e{e:02d}")
    return xc, np.array(xp), pair, groups


def _scorer(xc, xp, pair, log=None):  # type: ignore[no-untyped-def]
    pair_a = np.asarray(pair)

    def score(corr: LayerCorrection | None, te_c: np.ndarray, te_p: np.ndarray):  # type: ignore[no-untyped-def]
        if log is not None:
            log.append((corr, te_c, te_p))

        def moved(x: np.ndarray) -> np.ndarray:
            return x if corr is None else x + corr.shift(x)

        clean = np.abs(moved(xc[te_c])[:, 0] - xc[te_c][:, 0]) < 0.5
        pert = np.abs(moved(xp[te_p])[:, 0] - xc[pair_a[te_p]][:, 0]) < 0.5
        return clean.astype(float).tolist(), pert.astype(float).tolist()

    return score


def _select(xc, xp, pair, groups, score, **kw):  # type: ignore[no-untyped-def]
    return tune_by_generation(
        xc, xp, pair, groups, score, layer=1, num_layers=4, task="t_text_pert", **kw
    )


def test_a_correction_that_repairs_generation_is_chosen() -> None:
    xc, xp, pair, groups = _states()
    corr = _select(xc, xp, pair, groups, _scorer(xc, xp, pair))
    sel = corr.stats["generation_selection"]
    assert sel["chosen"] != "none"
    table = sel["table"]
    none = table[0]
    assert none["k"] is None and none["score_pert"] == 0.0
    best = max(r["score_pert"] for r in table)
    assert best > 0.9
    want = (sel["chosen"]["k"], sel["chosen"]["lam_rel"])
    chosen = next(r for r in table if (r["k"], r["lam_rel"]) == want)
    assert chosen["score_pert"] == best
    assert corr.k == sel["chosen"]["k"]
    # ties went to the smaller k, then the larger λ
    tied = [r for r in table[1:] if r["score_pert"] == best and r["eligible"]]
    assert chosen["k"] == min(r["k"] for r in tied)
    assert chosen["lam_rel"] == max(r["lam_rel"] for r in tied if r["k"] == chosen["k"])
    assert len(none["score_pert_folds"]) == 3


def test_no_correction_wins_when_nothing_beats_it() -> None:
    xc, xp, pair, groups = _states()

    def flat(corr, te_c, te_p):  # type: ignore[no-untyped-def]
        return [1.0] * len(te_c), [0.5] * len(te_p)

    corr = _select(xc, xp, pair, groups, flat)
    assert corr.stats["generation_selection"]["chosen"] == "none"
    assert np.allclose(corr.shift(xp), 0.0)


def test_a_setting_that_costs_clean_score_is_refused() -> None:
    xc, xp, pair, groups = _states()

    def trade(corr, te_c, te_p):  # type: ignore[no-untyped-def]
        if corr is None:
            return [1.0] * len(te_c), [0.2] * len(te_p)
        return [0.7] * len(te_c), [0.9] * len(te_p)

    strict = _select(xc, xp, pair, groups, trade)
    assert strict.stats["generation_selection"]["chosen"] == "none"
    loose = _select(xc, xp, pair, groups, trade, settings=GenTuneSettings(clean_margin=0.5))
    assert loose.stats["generation_selection"]["chosen"] != "none"


def test_held_out_examples_are_never_fitted_on() -> None:
    xc, xp, pair, groups = _states(n_examples=12)
    log: list = []
    _select(xc, xp, pair, groups, _scorer(xc, xp, pair, log), settings=GenTuneSettings(seed=3))
    g = np.asarray(groups)
    held_sets = set()
    for corr, te_c, te_p in log:
        held = set(g[te_p].tolist())
        assert held == {groups[pair.index(int(c))] for c in te_c}  # whole examples held out
        if corr is not None:  # fitted on the other examples' rows only
            assert corr.stats["n_pert"] == len(xp) - len(te_p)
            assert corr.stats["n_clean"] == len(xc) - len(te_c)
        held_sets.add(frozenset(held))
    assert len(held_sets) == 3
    assert set().union(*held_sets) == set(groups)


def test_too_few_examples_is_one_line() -> None:
    xc, xp, pair, groups = _states(n_examples=5)
    with pytest.raises(CorrectionError) as info:
        _select(xc, xp, pair, groups, _scorer(xc, xp, pair))
    msg = str(info.value)
    assert "\n" not in msg and "at least 6 train examples" in msg


def test_nan_states_are_one_line() -> None:
    xc, xp, pair, groups = _states()
    xp[4, 2] = np.nan
    with pytest.raises(CorrectionError, match="NaN"):
        _select(xc, xp, pair, groups, _scorer(xc, xp, pair))


def test_a_scorer_of_the_wrong_length_is_refused() -> None:
    xc, xp, pair, groups = _states()

    def short(corr, te_c, te_p):  # type: ignore[no-untyped-def]
        return [1.0] * len(te_c), [1.0]

    with pytest.raises(CorrectionError, match="perturbed values"):
        _select(xc, xp, pair, groups, short)


@pytest.mark.parametrize(
    "kw", [{"ks": (0,)}, {"lams_rel": (-1.0,)}, {"n_folds": 1}, {"clean_margin": -0.1}]
)
def test_bad_settings_are_refused(kw: dict) -> None:
    with pytest.raises(CorrectionError):
        GenTuneSettings(**kw)


def test_command_and_api_share_one_default_grid() -> None:
    """``fit --layer --select generation`` without grids tries what ``GenTuneSettings()`` tries."""
    import argparse

    from lm_eval_robust.cli.fit_layers import check_layer_args

    args = argparse.Namespace(
        method="ridge",
        positions="prompt",
        k=None,
        lam="auto",
        alpha="0",
        select="generation",
        k_grid=None,
        lam_grid=None,
        gen_folds=None,
        gen_kwargs=None,
        clean_margin=None,
        seed=0,
    )
    parsed = check_layer_args(args)
    default = GenTuneSettings()
    assert (parsed.ks, parsed.lams_rel) == (default.ks, default.lams_rel)
    assert (parsed.gen_folds, parsed.clean_margin) == (default.n_folds, default.clean_margin)
