"""Label log-likelihoods in float32 whatever the model's dtype: the head recomputed from its input.

Used by ``debiased_hf`` (:mod:`lm_eval_robust.scoring.model`) on its last-positions path, so that
labels of a bf16 model do not tie because of rounding.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lm_eval_robust.base.errors import UserError

__all__ = ["LABEL_SCORE_DTYPE", "Float32LabelScorer", "LabelScoreError"]

#: precision of every label log-likelihood of the last-positions path (recorded in results files)
LABEL_SCORE_DTYPE = "float32"


class LabelScoreError(UserError):
    """An output layer whose logits cannot be recomputed in float32 from its input."""


class Float32LabelScorer:
    """Logits at the scored positions in float32, from the head's input, whatever the model's dtype.

    A bf16 head rounds logits to 8 significant bits, so distinct labels often get exactly equal
    log-likelihoods and the first label wins every such tie. Here the head's input ``x`` (the
    model's own, in its dtype) is multiplied by a float32 copy of the head weight (and bias), the
    model's final logit soft-capping is applied in float32, and the log-softmax normaliser is then
    taken over the float32 logits. Only the scored positions are computed, so the cost is one
    ``[rows, hidden] x [hidden, vocab]`` product per batch; the float32 weight copy is made once.
    The first call checks that the recomputed logits agree with the model's own to its precision
    (a head that scales or post-processes logits otherwise is refused rather than mis-scored).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._weight: torch.Tensor | None = None
        self._bias: torch.Tensor | None = None
        self._key: tuple[int, int] | None = None
        self._checked = False
        cfg = getattr(model, "config", None)
        text_cfg = getattr(cfg, "text_config", None) or cfg
        cap = getattr(text_cfg, "final_logit_softcapping", None)
        self.softcap = float(cap) if cap else None

    def _head32(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        head = self.model.get_output_embeddings()  # type: ignore[operator]
        w = head.weight
        key = (w.data_ptr(), int(w._version))
        if self._weight is None or self._key != key:
            self._weight = w.detach().to(torch.float32)
            b = getattr(head, "bias", None)
            self._bias = None if b is None else b.detach().to(torch.float32)
            self._key = key
        return self._weight, self._bias

    def scores(self, logits: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits ``[batch, k, vocab]`` for the model's ``logits`` at the same positions."""
        if logits.dtype == torch.float32 and hidden.dtype == torch.float32:
            return logits
        w, b = self._head32()
        out = F.linear(hidden.detach().to(device=w.device, dtype=torch.float32), w, b)
        if self.softcap is not None:
            out = torch.tanh(out / self.softcap) * self.softcap
        out = out.to(logits.device)
        if not self._checked:
            self._check(out, logits)
        return out

    def _check(self, ours: torch.Tensor, theirs: torch.Tensor) -> None:
        ref = theirs.to(torch.float32)
        # the model's logits are ours rounded to its precision (up to summation order)
        eps = torch.finfo(theirs.dtype).eps
        tol = 4 * eps * ref.abs().amax().clamp(min=1.0) + 1e-3
        err = float((ours - ref).detach().abs().amax())
        if not math.isfinite(err) or err > float(tol):
            raise LabelScoreError(
                f"this model's output layer does more than x @ W.T (+ bias, soft-capping): its "
                f"{theirs.dtype} logits differ from the float32 recomputation by {err:.3g}; run "
                "it in float32 (--model_args dtype=float32)"
            )
        self._checked = True
