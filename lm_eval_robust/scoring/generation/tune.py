"""λ and k of an intermediate-layer fit chosen by a generation score on held-out train examples.

``fit --layer L --lam auto`` chooses λ by the squared error of the debiased top-``k`` shift, a
proxy: a small error need not give better answers. :func:`tune_by_generation` chooses λ and
``k`` together by what the correction is for. The train examples are dealt into grouped folds
(an example's clean prompt and its perturbations stay in one fold, seeded); for every fold and
every ``(k, λ_rel)`` of the grid a correction is fitted on the other folds
(:func:`~lm_eval_robust.scoring.generation.fit.fit_layer_correction`) and the held-out examples'
prompts are generated with it and scored by the task's metric (``score``, supplied by the
caller: the model's generation with the correction applied, then
:func:`~lm_eval_robust.tasks.generation.metrics.score_generation`). No correction is scored the same
way on the same prompts. ``score`` is called fold by fold, and within a fold once per row of the
table in its order (no correction first, then ``k``-major, λ in grid order).

Rule: among the settings whose mean held-out clean score is at least no correction's minus
``clean_margin``, the highest mean held-out perturbed score; ties (within ``tie_tol``) go to the
smaller ``k``, then the larger λ (the more regularised fit), and no correction wins them all.
When no correction wins, the returned correction is the identity (``W = 0``, ``β = 0``: the
edit moves nothing) with the choice recorded in its statistics.

Nothing here runs a model: ``score`` is a callback, so the rule is tested with synthetic scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lm_eval_robust.base.defaults import (
    DEFAULT_CLEAN_MARGIN,
    DEFAULT_GEN_FOLDS,
    DEFAULT_GEN_K_GRID,
    DEFAULT_GEN_LAM_GRID,
)
from lm_eval_robust.scoring.correction import CorrectionError
from lm_eval_robust.scoring.fit.folds import grouped_folds
from lm_eval_robust.scoring.generation.fit import LayerCorrection, fit_layer_correction

__all__ = [
    "GenTuneSettings",
    "Score",
    "tune_by_generation",
]

#: ``score(correction or None, clean rows, perturbed rows) -> (clean scores, perturbed scores)``:
#: the task's per-prompt generation score of the given held-out rows (row indices into
#: ``x_clean`` and ``x_pert``) with the correction applied (None: no correction)
Score = Callable[
    [LayerCorrection | None, np.ndarray, np.ndarray], tuple[Sequence[float], Sequence[float]]
]


@dataclass(frozen=True)
class GenTuneSettings:
    """The grid and the rule (see the module docstring)."""

    ks: tuple[int, ...] = DEFAULT_GEN_K_GRID
    lams_rel: tuple[float, ...] = DEFAULT_GEN_LAM_GRID
    n_folds: int = DEFAULT_GEN_FOLDS
    seed: int = 0
    clean_margin: float = DEFAULT_CLEAN_MARGIN
    tie_tol: float = 1e-9

    def __post_init__(self) -> None:
        if not self.ks or any(k < 1 for k in self.ks):
            raise CorrectionError(f"k values must be >= 1; got {list(self.ks)}")
        if not self.lams_rel or any(not (math.isfinite(v) and v > 0) for v in self.lams_rel):
            raise CorrectionError(f"relative λ values must be > 0; got {list(self.lams_rel)}")
        if self.n_folds < 2:
            raise CorrectionError(f"n_folds must be at least 2; got {self.n_folds}")
        if not (math.isfinite(self.clean_margin) and self.clean_margin >= 0):
            raise CorrectionError(f"clean_margin must be >= 0; got {self.clean_margin}")


@dataclass
class _Row:
    k: int | None  # None: no correction
    lam_rel: float | None
    clean: list[float] = field(default_factory=list)
    pert: list[float] = field(default_factory=list)
    eligible: bool = False

    @property
    def mean_clean(self) -> float:
        return float(np.mean(self.clean)) if self.clean else math.nan

    @property
    def mean_pert(self) -> float:
        return float(np.mean(self.pert)) if self.pert else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "lam_rel": self.lam_rel,
            "score_clean": self.mean_clean,
            "score_pert": self.mean_pert,
            "score_clean_folds": list(self.clean),
            "score_pert_folds": list(self.pert),
            "eligible": self.eligible,
        }


def _lam_scale(z: np.ndarray) -> float:
    """The scale λ_rel multiplies: the mean diagonal of ψᵀψ (as ``fit --layer --lam auto``)."""
    return float(np.mean(np.sum(z * z, axis=1)) + 1.0) * len(z) / (z.shape[1] + 1)


def _choose(rows: list[_Row], settings: GenTuneSettings) -> _Row:
    none = rows[0]
    floor = none.mean_clean - settings.clean_margin
    for r in rows:
        r.eligible = r.k is None or (
            math.isfinite(r.mean_pert) and r.mean_clean >= floor - settings.tie_tol
        )
    eligible = [r for r in rows if r.eligible]
    best = max(r.mean_pert for r in eligible)
    tied = [r for r in eligible if r.mean_pert >= best - settings.tie_tol]
    return min(
        tied,
        key=lambda r: (-1, 0.0) if r.k is None else (r.k, -float(r.lam_rel or 0.0)),
    )


def tune_by_generation(
    x_clean: np.ndarray,
    x_pert: np.ndarray,
    pair: Sequence[int],
    groups: Sequence[str],
    score: Score,
    *,
    layer: int,
    num_layers: int,
    task: str,
    settings: GenTuneSettings = GenTuneSettings(),
    alpha: float = 0.0,
    positions: str = "prompt",
    fingerprint: dict[str, Any] | None = None,
) -> LayerCorrection:
    """The layer correction with ``(k, λ)`` chosen by held-out generation score (module doc).

    Inputs as :func:`~lm_eval_robust.scoring.generation.fit.fit_layer_correction`: clean states
    ``[m, n]``, perturbed states ``[r, n]``, ``pair[i]`` the clean row of perturbed row ``i`` and
    ``groups[i]`` its source example. The returned correction's ``stats["generation_selection"]``
    holds the choice, the rule, the folds' settings and the whole table.
    """
    xc = np.asarray(x_clean, dtype=np.float64)
    xp = np.asarray(x_pert, dtype=np.float64)
    idx = np.asarray(pair, dtype=np.int64)
    g = np.asarray([str(v) for v in groups])
    if len(idx) != len(xp) or len(g) != len(xp):
        raise CorrectionError(
            f"pair ({len(idx)}) and groups ({len(g)}) must have one entry per perturbed state "
            f"({len(xp)})"
        )
    if not (np.isfinite(xc).all() and np.isfinite(xp).all()):
        raise CorrectionError(
            "layer states hold NaN or inf; run the model in float32 (--model_args dtype=float32)"
        )
    # the example of every clean row, from the perturbed rows that point to it
    clean_group = np.full(len(xc), "", dtype=object)
    clean_group[idx] = g
    if (clean_group == "").any():
        raise CorrectionError("every clean state must be the pair of some perturbed state")
    examples = np.unique(g)
    if len(examples) < 2 * settings.n_folds:
        raise CorrectionError(
            f"selecting k and λ by generation score with {settings.n_folds} folds needs at least "
            f"{2 * settings.n_folds} train examples (2 per fold); there are {len(examples)}: "
            "use more train examples (n_train) or fewer folds"
        )
    fold_p = grouped_folds(g, settings.n_folds, settings.seed)
    fold_of = {e: int(f) for e, f in zip(g.tolist(), fold_p.tolist(), strict=True)}
    fold_c = np.array([fold_of[str(e)] for e in clean_group], dtype=np.int64)
    n_folds = int(fold_p.max()) + 1
    max_k = min(xp.shape[1], *(int((fold_p != j).sum()) for j in range(n_folds)))
    ks = [k for k in settings.ks if k <= max_k]
    if not ks:
        raise CorrectionError(
            f"every k of {list(settings.ks)} exceeds the {max_k} differences a fold can fit; "
            "choose smaller k"
        )
    rows = [_Row(None, None)] + [_Row(k, rel) for k in ks for rel in settings.lams_rel]
    for j in range(n_folds):
        tr_p, te_p = np.flatnonzero(fold_p != j), np.flatnonzero(fold_p == j)
        tr_c, te_c = np.flatnonzero(fold_c != j), np.flatnonzero(fold_c == j)
        remap = {int(c): i for i, c in enumerate(tr_c)}
        pair_tr = [remap[int(c)] for c in idx[tr_p]]
        scale = _lam_scale(xp[tr_p] - (xp[tr_p] - xc[idx[tr_p]]).mean(axis=0))
        for row in rows:
            corr = None
            if row.k is not None and row.lam_rel is not None:
                corr = fit_layer_correction(
                    xc[tr_c],
                    xp[tr_p],
                    pair_tr,
                    g[tr_p].tolist(),
                    layer=layer,
                    num_layers=num_layers,
                    task=task,
                    k=row.k,
                    lam=row.lam_rel * scale,
                    alpha=alpha,
                    positions=positions,
                    fingerprint=fingerprint,
                )
            s_clean, s_pert = score(corr, te_c, te_p)
            if len(s_clean) != len(te_c) or len(s_pert) != len(te_p):
                raise CorrectionError(
                    f"the generation score returned {len(s_clean)} clean and {len(s_pert)} "
                    f"perturbed values for {len(te_c)} and {len(te_p)} prompts"
                )
            row.clean.append(float(np.mean(s_clean)) if len(s_clean) else math.nan)
            row.pert.append(float(np.mean(s_pert)))
    chosen = _choose(rows, settings)
    k = chosen.k if chosen.k is not None else 1
    z_all = xp - (xp - xc[idx]).mean(axis=0)
    lam = (chosen.lam_rel or settings.lams_rel[0]) * _lam_scale(z_all)
    final = fit_layer_correction(
        xc,
        xp,
        idx.tolist(),
        g.tolist(),
        layer=layer,
        num_layers=num_layers,
        task=task,
        k=k,
        lam=lam,
        alpha=alpha,
        positions=positions,
        fingerprint=fingerprint,
    )
    if chosen.k is None:  # no correction won: the identity edit
        final.W = np.zeros_like(final.W)
        final.beta = np.zeros_like(final.beta)
    final.stats["generation_selection"] = {
        "chosen": "none" if chosen.k is None else {"k": chosen.k, "lam_rel": chosen.lam_rel},
        "rule": (
            "grouped folds of train examples (seeded); among the (k, λ) whose mean held-out "
            "clean generation score is at least no correction's minus clean_margin, the highest "
            "mean held-out perturbed score; ties: no correction, then smaller k, then larger λ"
        ),
        "n_folds": n_folds,
        "seed": settings.seed,
        "clean_margin": settings.clean_margin,
        "table": [r.as_dict() for r in rows],
    }
    return final
