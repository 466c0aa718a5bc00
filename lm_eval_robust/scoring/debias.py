"""Using a correction: debiased label logits (a hook), the same folded into the LM head, and
label log-probabilities renormalised after the shift (for logged runs and vLLM).

The correction itself (data, file, fingerprint checks) is :mod:`lm_eval_robust.scoring.correction`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lm_eval_robust.base.errors import FIT_HINT, CorrectionError

if TYPE_CHECKING:
    import torch

    from lm_eval_robust.scoring.correction import Correction

__all__ = ["apply_correction", "corrected_label_logprobs", "merged_head_update"]


def apply_correction(
    correction: Correction, hidden: torch.Tensor, label_logits: torch.Tensor
) -> torch.Tensor:
    """Debiased label logits ``label_logits − (ψ(hidden)W + β)``, computed and returned in float32.

    ``hidden [..., n]`` is the LM head's input at the answer position, ``label_logits [..., d]``
    the logits of ``correction.label_token_ids`` there; the result is on ``label_logits``' device.
    """
    import torch

    lg = label_logits.to(torch.float32)
    d = correction.d
    if lg.shape[-1] != d:
        raise CorrectionError(
            f"label_logits has {lg.shape[-1]} columns but the correction has {d} labels "
            f"{correction.labels}"
        )
    beta = torch.as_tensor(np.asarray(correction.beta), dtype=torch.float32, device=lg.device)
    if correction.W is None:
        return lg - beta
    n = correction.n
    h = hidden.to(device=lg.device, dtype=torch.float32)
    if h.shape[-1] != n:
        raise CorrectionError(
            f"hidden states have size {h.shape[-1]} but the correction was fitted for hidden size "
            f"{n}; {FIT_HINT} for this model"
        )
    if h.shape[:-1] != lg.shape[:-1]:
        raise CorrectionError(
            f"hidden {tuple(h.shape)} and label_logits {tuple(lg.shape)} disagree on batch shape"
        )
    w = torch.as_tensor(np.asarray(correction.W), dtype=torch.float32, device=lg.device)
    bias = h @ w[:n] + w[-1]
    if correction.psi == "norm":
        bias = bias + torch.linalg.vector_norm(h, dim=-1, keepdim=True) * w[n]
    return lg - (bias + beta)


def corrected_label_logprobs(ll: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Label log-probabilities ``ll [d]`` after subtracting ``b [d]`` from the label logits.

    ``ll*_j = ll_j − b_j − log(1 − Σ_k p_k + Σ_k p_k e^{−b_k})`` with ``p_k = e^{ll_k}``: the
    softmax over the whole vocabulary, renormalised exactly, from the labels' own values.
    """
    ll = np.asarray(ll, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    p = np.exp(ll)
    rest = max(0.0, 1.0 - float(p.sum()))
    return np.asarray(ll - b - np.log(rest + float((p * np.exp(-b)).sum())), dtype=np.float64)


def merged_head_update(
    correction: Correction, head_weight: torch.Tensor, head_bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """New LM-head rows and bias for the label tokens, folding the correction into the head.

    With ``ψ(x) = [x, 1]``: ``rows_new = rows − W[:n]ᵀ`` and ``bias_new = bias − (W[n] + β)``
    (a missing head bias counts as 0; the caller must then add a bias to the head). Returned as
    float32 ``[d, n]`` and ``[d]`` on ``head_weight``'s device; cast to the head's dtype yourself.
    A ``psi="norm"`` correction is not linear in x and cannot be merged (CorrectionError).
    """
    import torch

    if not correction.mergeable:
        raise CorrectionError(
            f"a psi={correction.psi!r} correction uses ‖x‖ and is not mergeable into the LM head; "
            "apply it as a hook on the label logits instead"
        )
    ids = torch.as_tensor(correction.label_token_ids, dtype=torch.long, device=head_weight.device)
    rows = head_weight.detach().index_select(0, ids).to(torch.float32)
    if head_bias is not None:
        bias = head_bias.detach().index_select(0, ids).to(torch.float32)
    else:
        bias = torch.zeros(correction.d, dtype=torch.float32, device=head_weight.device)
    beta = torch.as_tensor(np.asarray(correction.beta), dtype=torch.float32, device=rows.device)
    if correction.W is None:
        return rows.clone(), bias - beta
    n = correction.n
    if rows.shape[1] != n:
        raise CorrectionError(
            f"LM head has hidden size {rows.shape[1]} but the correction was fitted for {n}; "
            f"{FIT_HINT} for this model"
        )
    w = torch.as_tensor(np.asarray(correction.W), dtype=torch.float32, device=rows.device)
    return rows - w[:n].T, bias - (w[n] + beta)
