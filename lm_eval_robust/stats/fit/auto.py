"""``fit --method auto``: choose the correction kind by grouped cross-validation on train.

Every correction kind that needs only collected features is a candidate, in this order of
simplicity (fewest fitted parameters first; ties go to the earlier one):

``none`` (no correction) < ``constant`` (one offset on a binary task's decision variable) <
``batch_calibration`` (d offsets, a mean) < ``clean_calibration`` (d offsets, a search) <
``ridge_mean`` (``ψ(x)W + β``, β the residual mean) < ``ridge_midpoint`` (the paper's β).

Contextual calibration is left out: it needs the model (content-free prompts), not features.

The train examples are dealt into ``n_folds`` folds by :func:`~lm_eval_robust.scoring.fit.folds.
grouped_folds` with ``seed``: an example's clean prompt and all its perturbations stay in one
fold. For each fold, each candidate is fitted on the other folds exactly as ``fit --method KIND``
fits it (ridge picks its λ by its own grouped CV inside those folds) and scored on the held-out
fold: balanced accuracy of the corrected label logits on its clean prompts and on its perturbed
prompts (an exact tie of the top logits gives each tied label 1/k, as the report scores it).

Rule: a candidate is *eligible* when its mean held-out clean BAC is at least ``none``'s minus
``clean_margin``; the chosen kind is the eligible one with the highest mean held-out perturbed
BAC, ties (within ``tie_tol``) going to the simpler kind. ``none`` is always eligible and the
simplest, so it is chosen whenever no candidate beats it. The chosen kind is then refitted on
the whole train split; ``none`` becomes an identity correction (``β = 0``, no ``W``) so that
every downstream command reads the file and changes nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from lm_eval_robust.base.defaults import DEFAULT_CLEAN_MARGIN, DEFAULT_FOLDS
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.scoring.correction import Correction
from lm_eval_robust.scoring.fit.folds import grouped_folds
from lm_eval_robust.scoring.fit.ridge import FitError
from lm_eval_robust.stats.classification import balanced_accuracy
from lm_eval_robust.stats.fit.measure import correction_bias, measure_radii
from lm_eval_robust.stats.fit.run import (
    FitSettings,
    constant_search_of,
    correction_identity,
    fit_features,
)
from lm_eval_robust.values.features import Features
from lm_eval_robust.values.ties import pred_shares

__all__ = [
    "CANDIDATES",
    "AutoError",
    "AutoSettings",
    "CandidateScore",
    "auto_fit",
    "cross_validate",
    "fold_assignment",
    "identity_correction",
]

#: candidate kinds, simplest first (the tie-break order)
CANDIDATES: tuple[str, ...] = (
    "none",
    "constant",
    "batch_calibration",
    "clean_calibration",
    "ridge_mean",
    "ridge_midpoint",
)

#: how far (BAC, a fraction: 0.01 is one point) a candidate's mean held-out clean BAC may fall
#: below no correction's and still be chosen

CRITERION = (
    "grouped K-fold CV on the train split (folds by source example, seeded): among the kinds "
    "whose mean held-out clean BAC is at least no correction's minus clean_margin, the highest "
    "mean held-out perturbed BAC; ties (within tie_tol) go to the simpler kind, in the order "
    + " < ".join(CANDIDATES)
)


class AutoError(UserError):
    """Train features that ``--method auto`` cannot cross-validate (one line: problem and fix)."""


@dataclass(frozen=True)
class AutoSettings:
    """Settings of the selection; ``fit`` holds those of every candidate's fit (φ, ψ, λ, α)."""

    n_folds: int = DEFAULT_FOLDS
    seed: int = 0
    clean_margin: float = DEFAULT_CLEAN_MARGIN
    tie_tol: float = 1e-9
    fit: FitSettings = dataclasses.field(default_factory=FitSettings)

    def __post_init__(self) -> None:
        if self.n_folds < 2:
            raise AutoError(f"--auto_folds must be at least 2; got {self.n_folds}")
        if not (math.isfinite(self.clean_margin) and 0.0 <= self.clean_margin <= 1.0):
            raise AutoError(
                f"--clean_margin is a BAC difference in [0, 1] (0.01 = one point); got "
                f"{self.clean_margin}"
            )


@dataclass
class CandidateScore:
    """One row of the CV table: a kind's held-out BACs per fold and their means."""

    method: str
    bac_clean_folds: list[float]
    bac_pert_folds: list[float]
    skipped: str | None = None  # why the kind was not cross-validated (e.g. binary tasks only)
    notes: list[str] = dataclasses.field(default_factory=list)
    eligible: bool = False

    @property
    def bac_clean(self) -> float:
        return _mean(self.bac_clean_folds)

    @property
    def bac_pert(self) -> float:
        return _mean(self.bac_pert_folds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "bac_clean": _jsonable(self.bac_clean),
            "bac_pert": _jsonable(self.bac_pert),
            "bac_clean_folds": [_jsonable(v) for v in self.bac_clean_folds],
            "bac_pert_folds": [_jsonable(v) for v in self.bac_pert_folds],
            "eligible": self.eligible,
            "skipped": self.skipped,
            "notes": list(self.notes),
        }


def _mean(values: list[float]) -> float:
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()) if a.size and np.isfinite(a).all() else math.nan


def _jsonable(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def fit_settings_of(method: str, base: FitSettings) -> FitSettings:
    """The ``FitSettings`` that fit candidate ``method`` (not ``none``)."""
    if method.startswith("ridge_"):
        return dataclasses.replace(base, method="ridge", beta=method.removeprefix("ridge_"))
    return dataclasses.replace(base, method=method)


def identity_correction(feats: Features) -> Correction:
    """``method="none"``: β = 0 and no W; applying it changes no logit."""
    identity = correction_identity(feats)
    d = len(identity["label_token_ids"])
    return Correction(method="none", W=None, beta=np.zeros(d, dtype=np.float64), **identity)


def subset(feats: Features, rows: np.ndarray) -> Features:
    """The features of the rows where the boolean mask ``rows`` is True."""
    recorded = feats.label_logits_recorded
    return dataclasses.replace(
        feats,
        x=feats.x[rows],
        label_logits=feats.label_logits[rows],
        label_token_ids=feats.label_token_ids[rows],
        pert_id=feats.pert_id[rows],
        gold=feats.gold[rows],
        example_id=feats.example_id[rows],
        label_logits_recorded=None if recorded is None else recorded[rows],
    )


def _check(feats: Features, n_folds: int) -> None:
    """One-line errors for features that cannot be cross-validated."""
    for name in ("x", "label_logits"):
        a = np.asarray(getattr(feats, name))
        if not np.isfinite(a).all():
            bad = int((~np.isfinite(a.reshape(a.shape[0], -1))).any(axis=1).sum())
            raise AutoError(
                f"{feats.task}: {name} holds NaN or inf in {bad} of {a.shape[0]} rows; "
                "collect the features again in float32"
            )
    examples = np.unique(feats.example_id)
    with_clean = np.unique(feats.example_id[feats.clean])
    n = len(with_clean)
    if n < 2 * n_folds:
        raise AutoError(
            f"{feats.task}: --method auto needs at least {2 * n_folds} train examples with a clean "
            f"prompt for {n_folds}-fold cross-validation (2 per fold); these features have {n} "
            f"(of {len(examples)}): collect more train examples or lower --auto_folds"
        )
    if not (feats.pert_id > 0).any():
        raise AutoError(
            f"{feats.task}: no perturbed prompt among the features; collect a perturbed task "
            "(e.g. ni065_format_pert_train)"
        )


def _held_out_bac(feats: Features, bias: np.ndarray) -> tuple[float, float]:
    """(clean BAC, perturbed BAC) of ``label_logits − bias`` on these rows."""
    logits = np.asarray(feats.label_logits, dtype=np.float64) - bias
    shares = pred_shares(logits)
    gold = np.asarray(feats.gold, dtype=np.int64)
    clean = feats.pert_id == 0
    return (
        balanced_accuracy(gold[clean], shares[clean]),
        balanced_accuracy(gold[~clean], shares[~clean]),
    )


def _candidate_fit(
    method: str, train: Features, settings: AutoSettings
) -> tuple[Callable[[np.ndarray], np.ndarray], str | None]:
    """A function ``x -> bias [rows, d]`` fitted on ``train``, and a note (or None)."""
    d = train.label_logits.shape[1]
    if method == "none":
        return (lambda x: np.zeros((x.shape[0], d))), None
    fs = fit_settings_of(method, settings.fit)
    if method == "constant":
        search = constant_search_of(train, fs)
        if search.b is None:  # what `fit --method constant` does: no offset, no file
            return (lambda x: np.zeros((x.shape[0], d))), "no offset chosen (" + search.reason + ")"
    corr = fit_features(train, fs, radii=False)
    return (lambda x: correction_bias(corr, x)), None


def fold_assignment(feats: Features, settings: AutoSettings) -> np.ndarray:
    """Fold index per row: all rows of one source example share a fold (seeded)."""
    return grouped_folds(feats.example_id.astype(str), settings.n_folds, settings.seed)


def cross_validate(feats: Features, settings: AutoSettings) -> list[CandidateScore]:
    """The CV table: every candidate's held-out clean and perturbed BAC per fold."""
    _check(feats, settings.n_folds)
    fold = fold_assignment(feats, settings)
    k = int(fold.max()) + 1
    d = feats.label_logits.shape[1]
    scores: list[CandidateScore] = []
    for method in CANDIDATES:
        row = CandidateScore(method, [], [])
        if method == "constant" and d != 2:
            row.skipped = f"binary tasks only (this task has {d} labels)"
            scores.append(row)
            continue
        for j in range(k):
            train = subset(feats, fold != j)
            held = subset(feats, fold == j)
            try:
                bias_of, note = _candidate_fit(method, train, settings)
            except FitError as exc:  # e.g. a singular Gram in one fold: the kind is out
                row.skipped = f"fold {j}: {exc}"
                break
            if note:
                row.notes.append(f"fold {j}: {note}")
            bc, bp = _held_out_bac(held, bias_of(np.asarray(held.x, dtype=np.float64)))
            row.bac_clean_folds.append(bc)
            row.bac_pert_folds.append(bp)
        if row.skipped:
            row.bac_clean_folds, row.bac_pert_folds = [], []
        scores.append(row)
    return scores


def choose(scores: list[CandidateScore], settings: AutoSettings) -> CandidateScore:
    """Mark the eligible rows and return the chosen one (see the module docstring)."""
    none = next(s for s in scores if s.method == "none")
    floor = none.bac_clean - settings.clean_margin
    for s in scores:
        s.eligible = (
            s.skipped is None
            and math.isfinite(s.bac_pert)
            and math.isfinite(s.bac_clean)
            and (s.method == "none" or s.bac_clean >= floor - settings.tie_tol)
        )
    eligible = [s for s in scores if s.eligible]  # CANDIDATES order: simplest first
    best = max(s.bac_pert for s in eligible)
    return next(s for s in eligible if s.bac_pert >= best - settings.tie_tol)


def auto_fit(feats: Features, settings: AutoSettings) -> Correction:
    """Cross-validate every candidate, choose one, refit it on all of ``feats``.

    The correction's ``stats["auto"]`` records the choice, the rule, the settings and the whole
    CV table (per kind: mean and per-fold held-out clean and perturbed BAC, eligibility, notes).
    """
    scores = cross_validate(feats, settings)
    chosen = choose(scores, settings)
    method = chosen.method
    note = None
    corr: Correction | None = None
    if method == "constant":
        search = constant_search_of(feats, fit_settings_of(method, settings.fit))
        if search.b is None:
            note = f"constant chosen by CV but no offset on all of train ({search.reason})"
            method = "none"
    if method == "none":
        corr = identity_correction(feats)
        corr.stats["radii"] = measure_radii(feats, corr, settings.fit.phi, settings.fit.m)
    else:
        corr = fit_features(feats, fit_settings_of(method, settings.fit))
    none = next(s for s in scores if s.method == "none")
    corr.stats["auto"] = {
        "chosen": method,
        "criterion": CRITERION,
        "order": list(CANDIDATES),
        "clean_margin": settings.clean_margin,
        "tie_tol": settings.tie_tol,
        "n_folds": int(max(len(s.bac_pert_folds) for s in scores)),
        "seed": settings.seed,
        "baseline": {"bac_clean": none.bac_clean, "bac_pert": none.bac_pert},
        "left_out": {"contextual_calibration": "needs the model, not features"},
        "note": note,
        "table": [s.as_dict() for s in scores],
    }
    return corr
