"""The ridge's ``λ`` and Gram penalty ``α`` chosen by grouped K-fold cross-validation (train only).

:func:`select_alpha` and :func:`select_lambda` sweep one grid each with the other setting fixed.
The training rows are checked once into a :class:`CVData`; the examples are dealt into folds by
:func:`~lm_eval_robust.scoring.fit.folds.fold_of_unique` (an example's clean and perturbed rows
share a fold); one :class:`~lm_eval_robust.scoring.fit.ridge.GramAccumulator` per fold holds its
sums, so each held-out fold is fitted from the others without a second pass over the features. Every
grid value is scored on the held-out fold (perturbed-prompt balanced accuracy of the debiased
logits, the mean |clean-logit change| and the clean balanced accuracy; exact ties of the top logits
give 1/k credit, as everywhere), and the best mean over folds wins
(:data:`CRITERION`). The solver itself is :mod:`lm_eval_robust.scoring.fit.ridge`.

One concept, a little over 500 lines with the two public entry points' full docstrings: the
steps of one cross-validation share the CV data, the folds and the score arrays.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from lm_eval_robust.base.defaults import DEFAULT_FOLDS
from lm_eval_robust.scoring.fit.folds import fold_of_unique
from lm_eval_robust.scoring.fit.ridge import (
    FitError,
    GramAccumulator,
    JitterWarning,
    ResidualRange,
    SingularGramError,
    as_2d,
    bias_from_w,
    check_finite,
    solve,
)
from lm_eval_robust.stats.classification import balanced_accuracy
from lm_eval_robust.values.ties import pred_shares

__all__ = [
    "ALPHA_GRID",
    "CRITERION",
    "LAMBDA_GRID_REL",
    "CVData",
    "Selection",
    "select_alpha",
    "select_lambda",
]

#: α values swept by :func:`select_alpha` by default (the paper's Table 14).
ALPHA_GRID: tuple[float, ...] = (-0.1, -0.05, -0.01, -0.005, 0.0, 0.005, 0.01, 0.05, 0.1)

#: λ values swept by :func:`select_lambda`, relative to the mean diagonal of ΨᵀΨ.
LAMBDA_GRID_REL: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)

CRITERION = (
    "maximise the mean over grouped folds of the held-out perturbed-prompt balanced accuracy of "
    "debiased logits; ties (within tie_tol) go to the smaller mean |clean-logit change| on "
    "held-out clean prompts, then to the value of smaller magnitude"
)


# --------------------------------------------------------------------------------------------
# the data of one cross-validation


@dataclass(frozen=True, eq=False)
class CVData:
    """The training rows one cross-validation reads, checked once (:meth:`of`).

    Perturbed rows: ``x_pert [N, n]`` (features of x̂), ``shift [N, d]`` (``f = M(x̂) − M(x)``),
    ``logits_pert [N, d]`` (``M(x̂)``), ``labels [N]`` (gold label index) and ``example_ids [N]``.
    Clean rows, one per example: ``x_clean [E, n]``, ``logits_clean [E, d]``, ``clean_ids [E]`` and
    ``labels_clean [E]`` (``-1`` where unknown: such rows are left out of the clean BAC).
    """

    x_pert: np.ndarray
    shift: np.ndarray
    logits_pert: np.ndarray
    labels: np.ndarray
    example_ids: np.ndarray
    x_clean: np.ndarray
    logits_clean: np.ndarray
    clean_ids: np.ndarray
    labels_clean: np.ndarray

    @property
    def n(self) -> int:
        """Feature size."""
        return int(self.x_pert.shape[1])

    @property
    def d(self) -> int:
        """Number of labels (logit columns)."""
        return int(self.shift.shape[1])

    @classmethod
    def of(
        cls,
        x_pert: ArrayLike,
        f: ArrayLike,
        logits_pert: ArrayLike,
        labels: ArrayLike,
        example_ids: ArrayLike,
        x_clean: ArrayLike,
        logits_clean: ArrayLike,
        clean_ids: ArrayLike,
        labels_clean: ArrayLike | None = None,
    ) -> CVData:
        """Check shapes, finiteness and labels; ``labels_clean`` defaults to each example's label
        on its perturbed rows (``-1`` for an example with none)."""
        x = as_2d("x_pert", x_pert)
        n = x.shape[1]
        shift = as_2d("f", f)
        d = shift.shape[1]
        logits = as_2d("logits_pert", logits_pert, d)
        x_c = as_2d("x_clean", x_clean, n)
        logits_c = as_2d("logits_clean", logits_clean, d)
        y = np.asarray(labels).reshape(-1)
        ids = np.asarray(example_ids).reshape(-1)
        ids_c = np.asarray(clean_ids).reshape(-1)
        rows = x.shape[0]
        for name, a in (("f", shift), ("logits_pert", logits), ("labels", y), ("example_ids", ids)):
            if a.shape[0] != rows:
                raise FitError(f"{name} has {a.shape[0]} rows; x_pert has {rows}")
        for name, a in (("logits_clean", logits_c), ("clean_ids", ids_c)):
            if a.shape[0] != x_c.shape[0]:
                raise FitError(f"{name} has {a.shape[0]} rows; x_clean has {x_c.shape[0]}")
        check_finite("logits_pert", logits)
        check_finite("logits_clean", logits_c)
        if not np.issubdtype(y.dtype, np.integer) or (y < 0).any() or (y >= d).any():
            raise FitError(f"labels must be label indices in [0, {d}) (columns of the logits)")
        if len(np.unique(ids_c)) != len(ids_c):
            raise FitError("clean_ids must list each example once")
        if labels_clean is None:
            y_c = _clean_labels_from_perturbed(ids, y, ids_c)
        else:
            y_c = np.asarray(labels_clean).reshape(-1)
            if y_c.shape[0] != x_c.shape[0]:
                raise FitError(f"labels_clean has {y_c.shape[0]} rows; x_clean has {x_c.shape[0]}")
        return cls(x, shift, logits, y, ids, x_c, logits_c, ids_c, y_c)


def _clean_labels_from_perturbed(
    ids: np.ndarray, labels: np.ndarray, clean_ids: np.ndarray
) -> np.ndarray:
    """Label of each clean example from its first perturbed row (-1: the example has none)."""
    first: dict[Any, Any] = {}
    for i, lab in zip(ids.tolist(), labels.tolist(), strict=True):
        first.setdefault(i, lab)
    return np.array([first.get(c, -1) for c in clean_ids.tolist()])


@dataclass(frozen=True, eq=False)
class _Folds:
    """Fold index of every perturbed and every clean row, and the number of folds."""

    of_pert: np.ndarray
    of_clean: np.ndarray
    k: int


def _grouped_folds(data: CVData, n_folds: int, seed: int) -> _Folds:
    """Folds over the examples of both row kinds, so an example's rows all share one fold."""
    uniq = np.unique(np.concatenate([data.example_ids, data.clean_ids]))
    fold_of_example = fold_of_unique(len(uniq), n_folds, seed)
    return _Folds(
        of_pert=fold_of_example[np.searchsorted(uniq, data.example_ids)],
        of_clean=fold_of_example[np.searchsorted(uniq, data.clean_ids)],
        k=int(fold_of_example.max()) + 1,
    )


def _fold_sums(data: CVData, folds: _Folds, psi: str, chunk: int) -> list[GramAccumulator]:
    """One accumulator per fold holding the Gram sums of that fold's rows."""
    sums = []
    for j in range(folds.k):
        acc = GramAccumulator(data.n, data.d, psi, chunk=min(chunk, 2048))
        in_fold = folds.of_pert == j
        if in_fold.any():
            acc.add(data.x_pert[in_fold], data.shift[in_fold])
        in_fold_clean = folds.of_clean == j
        if in_fold_clean.any():
            acc.add_clean(data.x_clean[in_fold_clean])
        sums.append(acc)
    return sums


# --------------------------------------------------------------------------------------------
# the grid and its scores


@dataclass(frozen=True, eq=False)
class _Grid:
    """The absolute ``λ`` and the ``α`` of each grid value (for a fit on all the rows), the value
    the table reports, and ``λ`` relative to the mean Gram diagonal (λ grids only)."""

    lam: np.ndarray
    alpha: np.ndarray
    reported: np.ndarray
    lam_rel: np.ndarray | None

    @property
    def size(self) -> int:
        return int(self.reported.size)


def _grid_of(param: str, grid: np.ndarray, fixed: float, sums: list[GramAccumulator]) -> _Grid:
    """``param`` "alpha": the grid is α, ``fixed`` λ; "lambda": the grid is λ / mean diag(ΨᵀΨ)."""
    if param == "alpha":
        return _Grid(lam=np.full(grid.size, fixed), alpha=grid, reported=grid, lam_rel=None)
    mean_diag = float(sum(np.diagonal(a._gram).mean() for a in sums))  # of the total ΨᵀΨ
    lam_abs = grid * mean_diag
    return _Grid(lam=lam_abs, alpha=np.full(grid.size, fixed), reported=lam_abs, lam_rel=grid)


@dataclass(eq=False)
class _Scores:
    """Held-out scores: ``[fold, grid value]`` arrays, per grid value counts, per fold baselines."""

    bac_pert: np.ndarray
    clean_change: np.ndarray
    bac_clean: np.ndarray
    failed: np.ndarray
    jitter_fits: np.ndarray
    baseline_pert: np.ndarray
    baseline_clean: np.ndarray

    @classmethod
    def empty(cls, k: int, size: int) -> _Scores:
        return cls(
            bac_pert=np.full((k, size), np.nan),
            clean_change=np.full((k, size), np.nan),
            bac_clean=np.full((k, size), np.nan),
            failed=np.zeros(size, dtype=bool),
            jitter_fits=np.zeros(size, dtype=np.int64),
            baseline_pert=np.full(k, np.nan),
            baseline_clean=np.full(k, np.nan),
        )


def _solve_grid(
    train: GramAccumulator, grid: _Grid, share: float, scores: _Scores
) -> list[np.ndarray | None]:
    """``W`` for each grid value from one fold's training sums (``None``: singular past the
    jitter limit, marked failed); ``λ`` is scaled by the training rows' ``share`` of all rows."""
    ws: list[np.ndarray | None] = []
    for v in range(grid.size):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", JitterWarning)
            try:
                w = solve(train, float(grid.lam[v]) * share, float(grid.alpha[v]))
            except SingularGramError:
                w = None
                scores.failed[v] = True
        if any(issubclass(c.category, JitterWarning) for c in caught):
            scores.jitter_fits[v] += 1
        ws.append(w)
    return ws


def _score_held_out_fold(
    data: CVData,
    folds: _Folds,
    j: int,
    ws: list[np.ndarray | None],
    beta: str,
    chunk: int,
    scores: _Scores,
) -> None:
    """Score every solved grid value on fold ``j`` (``β`` from the other folds' residuals)."""
    solved = [i for i, w in enumerate(ws) if w is not None]
    if not solved:
        return
    w_all = np.concatenate([w for w in ws if w is not None], axis=1)
    residuals = ResidualRange(w_all.shape[1])
    train = folds.of_pert != j
    residuals.update(
        data.x_pert[train], np.tile(data.shift[train], (1, len(solved))), w_all, chunk=chunk
    )
    beta_all = residuals.beta_by(beta)
    d = data.d
    held = folds.of_pert == j
    if held.any():
        y = data.labels[held]
        logits = data.logits_pert[held]
        scores.baseline_pert[j] = balanced_accuracy(y, pred_shares(logits))
        bias = bias_from_w(data.x_pert[held], w_all) + beta_all
        for o, i in enumerate(solved):
            debiased = logits - bias[:, o * d : (o + 1) * d]
            scores.bac_pert[j, i] = balanced_accuracy(y, pred_shares(debiased))
    held_clean = folds.of_clean == j
    if held_clean.any():
        bias_clean = bias_from_w(data.x_clean[held_clean], w_all) + beta_all
        y_c = data.labels_clean[held_clean]
        known = y_c >= 0
        logits_c = data.logits_clean[held_clean]
        if known.any():
            scores.baseline_clean[j] = balanced_accuracy(y_c[known], pred_shares(logits_c[known]))
        for o, i in enumerate(solved):
            bias_i = bias_clean[:, o * d : (o + 1) * d]
            scores.clean_change[j, i] = float(np.mean(np.abs(bias_i)))
            if known.any():
                debiased_c = logits_c[known] - bias_i[known]
                scores.bac_clean[j, i] = balanced_accuracy(y_c[known], pred_shares(debiased_c))


def _table(grid: _Grid, scores: _Scores) -> list[dict[str, Any]]:
    """One row per grid value: the value, its held-out scores over folds and its fit counts."""
    table: list[dict[str, Any]] = []
    for i in range(grid.size):
        folds_i = scores.bac_pert[:, i]
        row: dict[str, Any] = {"value": float(grid.reported[i])}
        if grid.lam_rel is not None:
            row["lam_rel"] = float(grid.lam_rel[i])
        row |= {
            "bac_pert": _nanmean(folds_i),
            "bac_pert_folds": [float(b) for b in folds_i],
            "bac_pert_sd": float(np.nanstd(folds_i)) if np.isfinite(folds_i).any() else math.nan,
            "clean_change": _nanmean(scores.clean_change[:, i]),
            "bac_clean": _nanmean(scores.bac_clean[:, i]),
            "jitter_fits": int(scores.jitter_fits[i]),
            "failed": bool(scores.failed[i]),
        }
        table.append(row)
    return table


def _best_row(table: list[dict[str, Any]], param: str, tie_tol: float) -> int:
    """Index of the row :data:`CRITERION` picks (failed or unscored rows never)."""
    cands = [i for i, r in enumerate(table) if not r["failed"] and math.isfinite(r["bac_pert"])]
    if not cands:
        raise FitError(
            f"every {param} value failed (singular Gram past the jitter limit); increase lam"
        )
    best = max(table[i]["bac_pert"] for i in cands)
    tied = [i for i in cands if table[i]["bac_pert"] >= best - tie_tol]

    def _key(i: int) -> tuple[float, float, int]:
        ch = table[i]["clean_change"]
        return (ch if math.isfinite(ch) else math.inf, abs(table[i]["value"]), i)

    return min(tied, key=_key)


def _nanmean(a: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    return float(np.nanmean(a)) if np.isfinite(a).any() else math.nan


# --------------------------------------------------------------------------------------------
# selection


@dataclass(eq=False)
class Selection:
    """Outcome of :func:`select_alpha` / :func:`select_lambda`.

    ``value`` is the chosen α or absolute λ; ``table`` has one dict per grid value with keys
    ``value`` (and ``lam_rel`` for λ), ``bac_pert`` (mean over folds of held-out perturbed BAC after
    debiasing), ``bac_pert_folds``, ``bac_pert_sd``, ``clean_change`` (mean held-out |ψ(x)W + β| on
    clean prompts), ``bac_clean`` (held-out clean BAC after debiasing), ``jitter_fits`` (fold fits
    that needed jitter) and ``failed`` (a fold fit was singular past the jitter limit; such values
    are never chosen). ``baseline`` holds the held-out BACs without debiasing.
    """

    param: str
    value: float
    values: np.ndarray
    table: list[dict[str, Any]]
    baseline: dict[str, float]
    criterion: str
    n_folds: int
    seed: int


def select_alpha(
    x_pert: ArrayLike,
    f: ArrayLike,
    logits_pert: ArrayLike,
    labels: ArrayLike,
    example_ids: ArrayLike,
    x_clean: ArrayLike,
    logits_clean: ArrayLike,
    clean_ids: ArrayLike,
    *,
    lam: float,
    alphas: Sequence[float] = ALPHA_GRID,
    psi: str = "linear",
    n_folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    labels_clean: ArrayLike | None = None,
    tie_tol: float = 1e-9,
    chunk: int = 4096,
    beta: str = "midpoint",
) -> Selection:
    """Choose the Gram-penalty ``α`` by K-fold cross-validation on TRAIN rows only.

    Inputs are the training split only: perturbed rows ``x_pert [N, n]``, ``f [N, d]``,
    ``logits_pert [N, d]`` (= M(x̂)), gold ``labels [N]`` (label index) and ``example_ids [N]``;
    clean rows ``x_clean [E, n]``, ``logits_clean [E, d]``, ``clean_ids [E]`` (one row per example;
    ``labels_clean`` defaults to the label of the example's perturbed rows). Folds are grouped by
    example id: an example's clean and perturbed rows are all in one fold.

    Criterion: maximise the mean over folds of the held-out fold's perturbed-prompt balanced
    accuracy of the debiased logits ``M(x̂) − (ψ(x̂)W + β)``, with ``W, β`` fitted on the other
    folds; ties (within ``tie_tol``) are broken by the smaller mean |clean-logit change|
    ``|ψ(x)W + β|`` on the held-out clean prompts, then by the smaller ``|α|``. In each fold ``λ``
    is scaled by the fold's share of training rows so ``λ`` relative to the Gram matches the final
    fit on all rows. Memory: one set of Gram sums per fold (``≈ 2·folds·(n+1)²·8`` bytes).
    """
    values = np.asarray(list(alphas), dtype=np.float64)
    if values.size == 0:
        raise FitError("the alpha grid is empty")
    data = CVData.of(
        x_pert, f, logits_pert, labels, example_ids, x_clean, logits_clean, clean_ids, labels_clean
    )
    return _cross_validate(
        "alpha", values, float(lam), data, psi, n_folds, seed, tie_tol, chunk, beta
    )


def select_lambda(
    x_pert: ArrayLike,
    f: ArrayLike,
    logits_pert: ArrayLike,
    labels: ArrayLike,
    example_ids: ArrayLike,
    x_clean: ArrayLike,
    logits_clean: ArrayLike,
    clean_ids: ArrayLike,
    *,
    alpha: float = 0.0,
    lams_rel: Sequence[float] = LAMBDA_GRID_REL,
    psi: str = "linear",
    n_folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    labels_clean: ArrayLike | None = None,
    tie_tol: float = 1e-9,
    chunk: int = 4096,
    beta: str = "midpoint",
) -> Selection:
    """Choose the ridge ``λ`` by K-fold cross-validation on TRAIN rows only.

    The grid is ``lams_rel × mean(diag(ΨᵀΨ))`` over all given training rows; the returned
    ``value`` is that absolute ``λ`` (for a final fit on all the given rows) and each table row
    also has ``lam_rel``. Same inputs, folds and criterion as :func:`select_alpha`: maximise the
    mean held-out perturbed-prompt balanced accuracy of debiased logits, ties broken by the smaller
    mean |clean-logit change|, then by the smaller ``λ``.
    """
    rel = np.asarray(list(lams_rel), dtype=np.float64)
    if (rel <= 0).any():
        raise FitError("lams_rel must be positive")
    if rel.size == 0:
        raise FitError("the lambda grid is empty")
    data = CVData.of(
        x_pert, f, logits_pert, labels, example_ids, x_clean, logits_clean, clean_ids, labels_clean
    )
    return _cross_validate(
        "lambda", rel, float(alpha), data, psi, n_folds, seed, tie_tol, chunk, beta
    )


def _cross_validate(
    param: str,
    values: np.ndarray,
    fixed: float,
    data: CVData,
    psi: str,
    n_folds: int,
    seed: int,
    tie_tol: float,
    chunk: int,
    beta: str,
) -> Selection:
    """The loop both selections share: ``param`` "alpha" (``values`` α, ``fixed`` λ) or
    "lambda" (``values`` λ / mean diag, ``fixed`` α)."""
    needs_clean = bool((values != 0).any()) if param == "alpha" else fixed != 0.0
    if needs_clean and data.x_clean.shape[0] == 0:
        raise FitError("a nonzero alpha needs clean rows (x_clean) for the Gram penalty")
    folds = _grouped_folds(data, n_folds, seed)
    sums = _fold_sums(data, folds, psi, chunk)
    total_rows = sum(a.n_rows for a in sums)
    grid = _grid_of(param, values, fixed, sums)
    scores = _Scores.empty(folds.k, grid.size)
    for j in range(folds.k):
        train = GramAccumulator.combine([a for i, a in enumerate(sums) if i != j])
        if train.n_rows == 0:
            raise FitError(f"fold {j}: no training rows outside the fold")
        ws = _solve_grid(train, grid, train.n_rows / total_rows, scores)
        del train
        _score_held_out_fold(data, folds, j, ws, beta, chunk, scores)
    table = _table(grid, scores)
    chosen = _best_row(table, param, tie_tol)
    return Selection(
        param=param,
        value=float(table[chosen]["value"]),
        values=np.array([r["value"] for r in table]),
        table=table,
        baseline={
            "bac_pert": _nanmean(scores.baseline_pert),
            "bac_clean": _nanmean(scores.baseline_clean),
        },
        criterion=CRITERION,
        n_folds=folds.k,
        seed=seed,
    )
