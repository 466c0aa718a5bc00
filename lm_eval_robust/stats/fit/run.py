"""From collected features to a correction file with its fit statistics.

``fit_features`` is the whole fit: pair perturbed and clean prompts, choose λ (and α) on the
train split only, solve the ridge (or search the constant offset), and measure the robustness
radii before and after on the same train rows (C_i, V_i, ε_V, ε_L, p_εV, p_εL).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lm_eval_robust.base.defaults import DEFAULT_FOLDS, DEFAULT_RADII_PHI
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.scoring.correction import Correction, correction_key
from lm_eval_robust.scoring.fit.ridge import BETA_RULES, fit_ridge
from lm_eval_robust.stats.fit.clean_cal import clean_offset
from lm_eval_robust.stats.fit.constant import constant_search, decision_gamma
from lm_eval_robust.stats.fit.measure import measure_radii
from lm_eval_robust.stats.fit.radii import perturbation_bound
from lm_eval_robust.stats.fit.ridge_cv import select_alpha, select_lambda
from lm_eval_robust.tasks.specs import get_spec
from lm_eval_robust.values.features import Features

log = logging.getLogger(__name__)

METHODS = ("ridge", "constant", "batch_calibration", "clean_calibration")


@dataclass(frozen=True)
class FitSettings:
    method: str = "ridge"
    lam: float | None = None  # None: chosen by grouped CV on train
    alpha: float | None = 0.0  # None: chosen by grouped CV on train
    psi: str = "linear"
    phi: float = DEFAULT_RADII_PHI
    m: int | None = None
    n_folds: int = DEFAULT_FOLDS
    beta: str = "midpoint"  # ridge β: the paper's residual-range midpoint, or the residual mean

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UserError(f"unknown fit method {self.method!r}; use one of {list(METHODS)}")
        if self.beta not in BETA_RULES:
            raise UserError(f"unknown beta rule {self.beta!r}; use one of {list(BETA_RULES)}")
        if self.psi not in ("linear", "norm"):
            raise UserError(f"unknown psi {self.psi!r}; use 'linear' or 'norm'")
        if not 0 < self.phi < 1:
            raise UserError(f"phi must be in (0, 1), got {self.phi}")
        if self.lam is not None and not (math.isfinite(self.lam) and self.lam >= 0):
            raise UserError(f"lam must be a number >= 0 or 'auto', got {self.lam}")
        if self.alpha is not None and not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise UserError(f"alpha must be a number >= 0 or 'auto', got {self.alpha}")


def correction_identity(feats: Features) -> dict[str, Any]:
    """What every correction kind records about where it belongs: label token ids, labels, task
    key, the model's fingerprint and the fit's first statistics (``stats`` keeps growing)."""
    spec = get_spec(feats.task.split("_")[0])
    p = feats.paired()
    clean_rows = feats.clean
    label_ids = [int(t) for t in feats.label_token_ids[np.argmax(clean_rows)]]
    if spec.is_multiple_choice:
        labels = [f"option {i + 1}" for i in range(p.f.shape[1])]
    else:
        labels = list(spec.labels)
    stats: dict[str, Any] = {
        "n_examples": len(np.unique(p.example_id)),
        "n_perturbed_rows": int(p.f.shape[0]),
        "labels_are_positions": spec.is_multiple_choice,
        "features_task": feats.task,
        "prompt_style": feats.prompt_style,
        # the RMS norm of the head's input on train: the scale of the load-time size check
        "x_norm": float(np.sqrt(np.mean(np.sum(feats.x.astype(np.float64) ** 2, axis=1)))),
    }
    return {
        "label_token_ids": label_ids,
        "labels": labels,
        "task": correction_key(feats.task),
        "fingerprint": dict(feats.fingerprint),
        "stats": stats,
    }


def fit_features(feats: Features, settings: FitSettings, *, radii: bool = True) -> Correction:
    """Fit a correction on one task's train features (``radii=False``: skip measuring the
    robustness radii, as the folds of ``--method auto`` do)."""
    corr = _fit(feats, settings)
    if radii:
        corr.stats["radii"] = measure_radii(feats, corr, settings.phi, settings.m)
    return corr


def _fit(feats: Features, settings: FitSettings) -> Correction:
    p = feats.paired()
    f = p.f
    clean_rows = feats.clean
    identity = correction_identity(feats)
    stats = identity["stats"]
    if settings.method == "batch_calibration":
        # Batch calibration (Zhou et al. 2023), estimated once on the train split: subtract the
        # mean label logit over every train prompt, clean and perturbed (equivalently the mean
        # label log-probability: the per-prompt normaliser is shared by all labels).
        beta = feats.label_logits.mean(axis=0)
        stats["estimated_on"] = "train split, all prompts (clean and perturbed)"
        corr = Correction(
            method="batch_calibration",
            W=None,
            beta=np.asarray(beta, dtype=np.float64),
            **identity,
        )
        return corr
    if settings.method == "clean_calibration":
        # the clean-calibrated reference: no perturbed prompt is used
        beta = clean_offset(feats.label_logits[clean_rows], feats.gold[clean_rows])
        stats["estimated_on"] = "train split, clean prompts only (offset maximising BAC)"
        corr = Correction(method="clean_calibration", W=None, beta=beta, **identity)
        return corr
    if settings.method == "constant":
        search = constant_search_of(feats, settings)
        stats["constant_search"] = {
            "C": search.C,
            "V": search.V,
            "baseline": search.baseline,
            "at_b": search.at_b,
        }
        corr = Correction.from_constant(search, **identity)
        return corr
    cv_args = dict(
        x_pert=p.x_pert,
        f=f,
        logits_pert=p.logits_pert,
        labels=p.gold,
        example_ids=p.example_id,
        x_clean=p.x_clean,
        logits_clean=p.logits_clean,
        clean_ids=p.example_id_clean,
        psi=settings.psi,
        n_folds=settings.n_folds,
        labels_clean=p.gold_clean,
        beta=settings.beta,
    )
    lam = settings.lam
    alpha = 0.0 if settings.alpha is None else settings.alpha
    if lam is None:
        sel = select_lambda(alpha=alpha, **cv_args)  # type: ignore[arg-type]
        lam = float(sel.value)
        stats["lambda_selection"] = {"criterion": sel.criterion, "table": sel.table}
    if settings.alpha is None:
        sel_a = select_alpha(lam=lam, **cv_args)  # type: ignore[arg-type]
        alpha = float(sel_a.value)
        stats["alpha_selection"] = {"criterion": sel_a.criterion, "table": sel_a.table}
    fit = fit_ridge(
        p.x_pert, f, p.x_clean, lam=lam, alpha=alpha, psi=settings.psi, beta=settings.beta
    )
    stats["beta_rule"] = settings.beta
    return Correction.from_ridge(fit, **identity)


def constant_search_of(feats: Features, settings: FitSettings) -> Any:
    """The input-independent offset search on the train features (binary tasks only)."""
    p = feats.paired()
    if p.f.shape[1] != 2:
        raise UserError(
            f"{feats.task}: input-independent debiasing is for binary tasks; this task has "
            f"{p.f.shape[1]} labels (use --method ridge)"
        )
    bound = perturbation_bound(p.x_pert, p.example_id, p.x_clean, p.example_id_clean)
    return constant_search(
        p.logits_pert,
        p.f,
        p.gold,
        p.example_id,
        gamma=decision_gamma(feats.head_rows, [0, 1]),
        c=bound.c,
        n=p.x_pert.shape[1],
        m=settings.m,
        phi=settings.phi,
        logits_clean=p.logits_clean,
        labels_clean=p.gold_clean,
    )


def contextual_calibration(
    task: str, lm: Any, config: Any, fingerprint: dict[str, Any] | None = None
) -> Correction:
    """Contextual calibration (Zhao et al. 2021) as a correction: ``β = log p_cf(label)``.

    ``p_cf`` is the model's distribution over the labels for content-free queries ("N/A", "",
    "[MASK]") in the task's clean prompt (its Definition and demonstrations), averaged over the
    three; subtracting its log from the label logits is the paper's ``W = diag(p_cf)^-1``.
    With ``prompt_style=chat`` the prompts go through the model's chat template and the label is
    the first token of the answer, as ``--apply_chat_template`` does in the harness.
    """
    from lm_eval.api.instance import Instance

    from lm_eval_robust.tasks.ni import content_free_prompts

    spec = get_spec(task.split("_")[0])
    prompts, choices = content_free_prompts(spec.short, config)
    style = "chat" if getattr(config, "prompt_style", "auto") == "chat" else "plain"
    if style == "chat":
        prompts = [lm.apply_chat_template([{"role": "user", "content": p}]) for p in prompts]
    else:
        choices = [" " + c for c in choices]
    reqs = [
        Instance("loglikelihood", {}, (prompt, choice), idx)
        for prompt in prompts
        for idx, choice in enumerate(choices)
    ]
    ll = np.array([r[0] for r in lm.loglikelihood(reqs, disable_tqdm=True)], dtype=np.float64)
    ll = ll.reshape(len(prompts), len(choices))
    logp = ll - np.logaddexp.reduce(ll, axis=1, keepdims=True)  # renormalise over the labels
    p_cf = np.exp(logp).mean(axis=0)
    ids = [int(lm.tok_encode(prompts[0] + c)[-1]) for c in choices]
    labels = (
        [f"option {i + 1}" for i in range(len(choices))]
        if spec.is_multiple_choice
        else list(spec.labels)
    )
    return Correction(
        method="contextual_calibration",
        W=None,
        beta=np.log(p_cf),
        label_token_ids=ids,
        labels=labels,
        task=correction_key(task),
        fingerprint=dict(fingerprint if fingerprint is not None else lm.fingerprint),
        stats={
            "p_cf": p_cf.tolist(),
            "content_free": ["N/A", "", "[MASK]"],
            "prompt_style": style,
            "labels_are_positions": spec.is_multiple_choice,
        },
    )
