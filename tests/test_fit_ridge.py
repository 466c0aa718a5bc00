"""Ridge debiasing: streaming Gram == dense solve, jitter, β, selection on train only."""

from __future__ import annotations

import math
import time
import tracemalloc
import warnings

import numpy as np
import pytest

from lm_eval_robust.scoring.fit import ridge
from lm_eval_robust.scoring.fit.folds import grouped_folds
from lm_eval_robust.scoring.fit.ridge import (
    GramAccumulator,
    JitterWarning,
    ResidualRange,
    beta_midpoint,
    fit_ridge,
    predict_bias,
    psi_features,
    solve,
)
from lm_eval_robust.stats.fit.ridge_cv import ALPHA_GRID, select_alpha, select_lambda


def _problem(seed: int = 0, rows: int = 60, n: int = 6, d: int = 3, clean: int = 15):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, n)) * rng.uniform(0.5, 3.0, size=n) + rng.normal(size=n)
    f = rng.normal(size=(rows, d))
    xc = rng.normal(size=(clean, n)) + 0.5
    return x, f, xc


def _dense(x, f, xc, lam, alpha, psi):
    P = psi_features(x, psi)
    H = P.T @ P + lam * np.eye(P.shape[1])
    if xc is not None:
        Pc = psi_features(xc, psi)
        H = H + alpha * Pc.T @ Pc
    return np.linalg.solve(H, P.T @ f)


@pytest.mark.parametrize("psi", ["linear", "norm"])
@pytest.mark.parametrize("alpha", [0.0, 0.3, -0.05])
def test_streaming_gram_equals_dense_solve(psi, alpha):
    x, f, xc = _problem()
    acc = GramAccumulator(x.shape[1], f.shape[1], psi, chunk=7)
    acc.add(x, f)
    acc.add_clean(xc)
    w = solve(acc, lam=0.7, alpha=alpha)
    np.testing.assert_allclose(w, _dense(x, f, xc, 0.7, alpha, psi), rtol=1e-8, atol=1e-12)
    P = psi_features(x, psi)
    np.testing.assert_allclose(acc.gram, P.T @ P, rtol=1e-12)
    np.testing.assert_allclose(acc.cross, P.T @ f, rtol=1e-12, atol=1e-12)
    assert acc.n_rows == x.shape[0] and acc.n_clean == xc.shape[0]


def test_chunk_size_and_call_split_invariance():
    x, f, xc = _problem(seed=1, rows=101)
    ref: np.ndarray | None = None
    for chunk in (1, 3, 16, 1000):
        acc = GramAccumulator(x.shape[1], f.shape[1], chunk=chunk)
        for part in np.array_split(np.arange(x.shape[0]), 4):
            acc.add(x[part], f[part])
        acc.add_clean(xc[:5])
        acc.add_clean(xc[5:])
        w = solve(acc, 0.1, 0.02)
        if ref is None:
            ref = w
        np.testing.assert_allclose(w, ref, rtol=1e-10, atol=1e-12)
    # merge of two halves == one accumulator
    a1 = GramAccumulator(x.shape[1], f.shape[1])
    a2 = GramAccumulator(x.shape[1], f.shape[1])
    a1.add(x[:50], f[:50])
    a2.add(x[50:], f[50:])
    a2.add_clean(xc)
    merged = GramAccumulator.combine([a1, a2])
    assert ref is not None
    np.testing.assert_allclose(solve(merged, 0.1, 0.02), ref, rtol=1e-10, atol=1e-12)


def test_beta_midpoint_by_hand():
    np.testing.assert_allclose(beta_midpoint([-1.0, 2.0], [3.0, 2.5]), np.array([1.0, 2.25]))
    # W = 0 (intercept row included) -> residuals are f itself
    f = np.array([[1.0, -2.0], [4.0, 0.0], [-2.0, 6.0]])
    x = np.zeros((3, 2))
    rr = ResidualRange(2)
    rr.update(x[:2], f[:2], np.zeros((3, 2)))
    rr.update(x[2:], f[2:], np.zeros((3, 2)))
    np.testing.assert_allclose(rr.rmin, [-2.0, -2.0])
    np.testing.assert_allclose(rr.rmax, [4.0, 6.0])
    np.testing.assert_allclose(rr.beta, [1.0, 2.0])
    np.testing.assert_allclose(rr.half_range, [3.0, 4.0])


def test_fit_ridge_beta_is_midpoint_of_dense_residuals():
    x, f, xc = _problem(seed=2)
    fit = fit_ridge(x, f, xc, lam=0.5, alpha=0.1, chunk=8)
    w = _dense(x, f, xc, 0.5, 0.1, "linear")
    r = f - psi_features(x) @ w
    np.testing.assert_allclose(fit.beta, 0.5 * (r.max(0) + r.min(0)), rtol=1e-8, atol=1e-10)
    # β minimises the largest |residual|: the sup is the half-range
    np.testing.assert_allclose(np.abs(r - fit.beta).max(0), 0.5 * (r.max(0) - r.min(0)), rtol=1e-8)
    assert fit.residual_half_range is not None
    np.testing.assert_allclose(fit.residual_half_range, 0.5 * (r.max(0) - r.min(0)), rtol=1e-8)
    np.testing.assert_allclose(predict_bias(fit, x), psi_features(x) @ fit.W + fit.beta)


def test_jitter_warning_on_singular_gram():
    x, f, _ = _problem(seed=3)
    xd = np.concatenate([x, x[:, :1]], axis=1)  # duplicated column: ΨᵀΨ singular
    acc = GramAccumulator(xd.shape[1], f.shape[1])
    acc.add(xd, f)
    with pytest.warns(JitterWarning, match=r"jitter [0-9.e+-]+ .*lam \(now 0\)"):
        w = solve(acc, lam=0.0)
    assert np.isfinite(w).all()
    # the jittered solution still fits as well as least squares
    P = psi_features(xd)
    ls = np.linalg.lstsq(P, f, rcond=None)[0]
    np.testing.assert_allclose(P @ w, P @ ls, atol=1e-5)
    # a ridge penalty removes the need for jitter
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        solve(acc, lam=1.0)


def test_error_past_jitter_limit():
    x, f, _ = _problem(seed=4)
    acc = GramAccumulator(x.shape[1], f.shape[1])
    acc.add(x, f)
    acc.add_clean(x)  # Ψ_c = Ψ, so α = −10 makes H = −9ΨᵀΨ: negative definite
    with pytest.raises(
        ValueError, match=r"singular/ill-conditioned even with jitter .*increase lam"
    ):
        solve(acc, lam=0.0, alpha=-10.0)
    with pytest.raises(ValueError, match="add_clean"):
        empty_clean = GramAccumulator(x.shape[1], f.shape[1])
        empty_clean.add(x, f)
        solve(empty_clean, 1.0, alpha=0.1)


def test_nan_and_inf_rejected_with_one_line_message():
    x, f, _ = _problem(seed=5)
    acc = GramAccumulator(x.shape[1], f.shape[1], chunk=8)
    xb = x.copy()
    xb[[3, 40], 1] = np.nan
    with pytest.raises(ValueError) as e:
        acc.add(xb, f)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("x_pert contains NaN in 2 rows")
    assert "re-run collection in float32 or check the model" in msg
    assert acc.n_rows == 0 and not acc.gram.any()  # a rejected call changes nothing
    fb = f.copy()
    fb[7, 0] = np.inf
    with pytest.raises(ValueError, match=r"^f contains inf in 1 rows"):
        acc.add(x, fb)
    with pytest.raises(ValueError, match=r"^x_clean contains NaN"):
        acc.add_clean(xb)
    with pytest.raises(ValueError, match="columns"):
        acc.add(x[:, :3], f)


def test_recovers_planted_linear_shift():
    rng = np.random.default_rng(6)
    n, d, rows = 10, 3, 4000
    A = rng.normal(size=(n, d))
    c = np.array([0.5, -2.0, 3.0])
    x = rng.normal(size=(rows, n)) * 2 + 1
    f = x @ A + c + 1e-3 * rng.normal(size=(rows, d))
    fit = fit_ridge(x, f, lam=1e-6)
    np.testing.assert_allclose(fit.W[:n], A, atol=1e-3)
    np.testing.assert_allclose(fit.W[n] + fit.beta, c, atol=1e-3)
    assert np.abs(predict_bias(fit, x) - f).max() < 1e-2
    # the norm feature adds a column that the planted shift does not need
    fit_n = fit_ridge(x, f, lam=1e-6, psi="norm")
    assert fit_n.W.shape == (n + 2, d)
    assert np.abs(predict_bias(fit_n, x) - f).max() < 1e-2


def test_n4096_accumulation_bounded_memory():
    n, d, rows, chunk = 4096, 4, 1024, 512
    rng = np.random.default_rng(7)
    x = rng.standard_normal((rows, n), dtype=np.float32)
    f = rng.standard_normal((rows, d), dtype=np.float32)
    gram_bytes = (n + 1) ** 2 * 8
    chunk_bytes = chunk * (n + 1) * 8
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        acc = GramAccumulator(n, d, chunk=chunk)
        for _ in range(2):
            acc.add(x, f)
        _, peak_first = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        acc.add(x, f)  # more rows: no more memory
        _, peak_more = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - t0
    assert acc.n_rows == 3 * rows
    # the Gram itself, a float64 chunk of ψ, the small cross term: nothing that grows with rows
    assert peak_first < gram_bytes + 2 * chunk_bytes + 8 * 2**20, peak_first
    assert peak_more <= peak_first + 2**20
    assert elapsed < 10.0
    np.testing.assert_allclose(acc._cross[-1], 3 * f.astype(np.float64).sum(0), rtol=1e-9)


# ---------------------------------------------------------------------------------------------
# selection


def _classification(seed: int = 0, examples: int = 40, k: int = 6, n: int = 8, d: int = 2):
    """Clean features separate the labels; perturbations add a systematic shift that pushes
    predictions toward label 0 (plus noise). Returns dict of per-row arrays."""
    rng = np.random.default_rng(seed)
    head = rng.normal(size=(n, d))
    # class k's center points along head[:, k] − mean of the other rows: clean prompts are right
    centers = np.stack([head[:, j] - np.delete(head, j, axis=1).mean(1) for j in range(d)])
    centers = 3.0 * centers / np.linalg.norm(centers, axis=1, keepdims=True)
    y_ex = np.arange(examples) % d
    xc = centers[y_ex] + 0.5 * rng.normal(size=(examples, n))
    shift = 4.0 * centers[0]
    ids = np.repeat(np.arange(examples) + 1000, k)
    xp = xc[ids - 1000] + shift + 0.4 * rng.normal(size=(examples * k, n))
    lc = xc @ head
    lp = xp @ head
    return {
        "x_pert": xp,
        "f": lp - lc[ids - 1000],
        "logits_pert": lp,
        "labels": y_ex[ids - 1000],
        "example_ids": ids,
        "x_clean": xc,
        "logits_clean": lc,
        "clean_ids": np.arange(examples) + 1000,
    }


def test_grouped_folds_never_split_an_example():
    ids = np.repeat(np.array(["a", "b", "c", "d", "e", "f", "g"]), 3)
    folds = grouped_folds(ids, n_folds=3, seed=1)
    for i in np.unique(ids):
        assert len(set(folds[ids == i])) == 1
    assert set(folds.tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(folds, grouped_folds(ids[::-1], 3, 1)[::-1])


def test_select_alpha_uses_only_the_given_train_rows(monkeypatch):
    data = _classification(seed=1)
    # the train arrays are views into bigger buffers whose other rows are NaN: reading past them
    # would hit the NaN check; rows we pass are recorded to check each fold's accumulators
    rows = data["x_pert"].shape[0]
    big = np.full((rows * 2, data["x_pert"].shape[1]), np.nan)
    big[:rows] = data["x_pert"]
    train_x = big[:rows]
    train_rows = {r.tobytes() for r in data["x_pert"]}
    clean_rows = {r.tobytes() for r in data["x_clean"]}
    seen: list[np.ndarray] = []
    orig_add, orig_add_clean = GramAccumulator.add, GramAccumulator.add_clean

    def spy_add(self, x, f):
        assert all(r.tobytes() in train_rows for r in np.asarray(x, dtype=np.float64))
        seen.append(np.asarray(x))
        return orig_add(self, x, f)

    def spy_add_clean(self, x):
        assert all(r.tobytes() in clean_rows for r in np.asarray(x, dtype=np.float64))
        return orig_add_clean(self, x)

    monkeypatch.setattr(GramAccumulator, "add", spy_add)
    monkeypatch.setattr(GramAccumulator, "add_clean", spy_add_clean)
    kw = {k: v for k, v in data.items() if k != "x_pert"}
    sel = select_alpha(train_x, lam=1.0, n_folds=4, seed=3, **kw)
    assert sel.value in ALPHA_GRID
    assert sel.param == "alpha" and len(sel.table) == len(ALPHA_GRID)
    # every accumulated block holds rows of one fold only (folds never split an example)
    folds = grouped_folds(data["example_ids"], 4, 3)
    index = {r.tobytes(): i for i, r in enumerate(data["x_pert"])}
    for block in seen:
        fs = {folds[index[r.tobytes()]] for r in block}
        assert len(fs) == 1
    assert sum(len(b) for b in seen) == rows
    # same answer from plain copies
    monkeypatch.setattr(GramAccumulator, "add", orig_add)
    monkeypatch.setattr(GramAccumulator, "add_clean", orig_add_clean)
    sel2 = select_alpha(data["x_pert"].copy(), lam=1.0, n_folds=4, seed=3, **kw)
    assert sel2.value == sel.value
    assert [r["bac_pert"] for r in sel2.table] == [r["bac_pert"] for r in sel.table]


def test_select_alpha_criterion_and_debiasing_helps():
    data = _classification(seed=2)
    sel = select_alpha(lam=1.0, n_folds=5, **data)
    best = max(r["bac_pert"] for r in sel.table if not r["failed"])
    chosen = next(r for r in sel.table if r["value"] == sel.value)
    assert chosen["bac_pert"] == pytest.approx(best, abs=1e-9)
    tied = [r for r in sel.table if r["bac_pert"] >= best - 1e-9]
    assert chosen["clean_change"] == min(r["clean_change"] for r in tied)
    assert chosen["bac_pert"] > sel.baseline["bac_pert"]  # the planted shift hurt, debiasing helps
    assert "balanced accuracy" in sel.criterion and "clean-logit change" in sel.criterion
    assert all(len(r["bac_pert_folds"]) == sel.n_folds for r in sel.table)


def test_select_lambda_grid_scaled_by_mean_diag():
    data = _classification(seed=3)
    rel = (1e-3, 1e-1, 10.0)
    sel = select_lambda(lams_rel=rel, n_folds=3, **data)
    acc = GramAccumulator(data["x_pert"].shape[1], 2)
    acc.add(data["x_pert"], data["f"])
    np.testing.assert_allclose(sel.values, np.array(rel) * acc.mean_diag, rtol=1e-10)
    assert sel.value in sel.values
    assert [r["lam_rel"] for r in sel.table] == list(rel)


def test_select_rejects_mismatched_rows():
    data = _classification(seed=4)
    data["labels"] = data["labels"][:-1]
    with pytest.raises(ValueError, match="labels has"):
        select_alpha(lam=1.0, **data)


def test_psi_validation():
    with pytest.raises(ValueError, match="psi must be one of"):
        GramAccumulator(3, 1, psi="quadratic")
    assert ridge.psi_dim(5, "norm") == 7


def test_select_alpha_marks_singular_values_failed_and_skips_them():
    data = _classification(seed=5)
    data["x_clean"] = data["x_clean"] * 10.0  # large Ψ_cᵀΨ_c: α = −1 makes H indefinite
    sel = select_alpha(lam=1e-3, alphas=(-1.0, 0.0, 0.01), n_folds=3, **data)
    assert sel.table[0]["failed"] and math.isnan(sel.table[0]["bac_pert"])
    assert sel.value in (0.0, 0.01)
    with pytest.raises(ValueError, match="nonzero alpha needs clean rows"):
        select_alpha(
            **{
                **data,
                "x_clean": data["x_clean"][:0],
                "logits_clean": data["logits_clean"][:0],
                "clean_ids": data["clean_ids"][:0],
            },
            lam=1.0,
        )


def test_beta_mean_rule_and_how_it_differs_from_the_midpoint():
    # one skewed target: residuals 0, 0, 0, 8 -> midpoint 4, mean 2
    f = np.array([[0.0, 1.0], [0.0, -1.0], [0.0, 1.0], [8.0, -1.0]])
    rr = ResidualRange(2)
    rr.update(np.zeros((4, 2)), f, np.zeros((3, 2)))
    np.testing.assert_allclose(rr.beta_by("midpoint"), [4.0, 0.0])
    np.testing.assert_allclose(rr.beta_by("mean"), [2.0, 0.0])
    with pytest.raises(ridge.FitError, match="unknown beta rule"):
        rr.beta_by("median")
    # on a fit: β = the mean of the dense residuals left after ψ(x̂)W, same W as the midpoint rule
    x, f2, xc = _problem(seed=4)
    mid = fit_ridge(x, f2, xc, lam=0.5, alpha=0.1, chunk=8)
    mean = fit_ridge(x, f2, xc, lam=0.5, alpha=0.1, chunk=8, beta="mean")
    np.testing.assert_array_equal(mid.W, mean.W)
    r = f2 - psi_features(x) @ mean.W
    np.testing.assert_allclose(mean.beta, r.mean(0), rtol=1e-8, atol=1e-10)


def test_select_lambda_scores_the_rule_it_is_given():
    data = _classification(seed=3)
    a = select_lambda(lams_rel=(1e-3, 1.0), n_folds=3, **data)
    b = select_lambda(lams_rel=(1e-3, 1.0), n_folds=3, beta="mean", **data)
    assert a.baseline == b.baseline  # the uncorrected logits do not depend on β
    assert [r["bac_pert"] for r in a.table] != [r["bac_pert"] for r in b.table]
