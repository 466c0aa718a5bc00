"""``debiased_hf``: the harness's HF model, with last-position logits and debiasing corrections.

Without a correction it returns the log-likelihoods of ``--model hf`` for the same requests, but
for short continuations (first-token classification: every label of our tasks) it runs the LM
head on the continuation's positions only, instead of on every position: with a 262k vocabulary
the full ``[batch, seq, vocab]`` logits tensor is most of the cost. A forward pre-hook on the
output layer gathers each row's last position before the head multiplies, so the model's own
forward (and any logit soft-capping after the head) runs unchanged; the same hook hands us the
head's input, the last hidden state ``x`` used by the corrections and by feature collection.
Requests with longer continuations, ``loglikelihood_rolling`` and generation take the parent
class's path.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from tqdm import tqdm

from lm_eval_robust.errors import UserError
from lm_eval_robust.offline_models import resolve_pretrained

log = logging.getLogger(__name__)


class LabelTokenError(UserError):
    """Labels of one of our tasks that are not distinct single tokens for this tokenizer."""


@contextmanager
def last_positions_head(
    model: torch.nn.Module, positions: torch.Tensor
) -> Iterator[dict[str, torch.Tensor]]:
    """Run the output layer on ``hidden[b, positions[b, :]]`` only; yields {'hidden': [b, k, h]}.

    Installed as a forward pre-hook on ``model.get_output_embeddings()`` and removed on exit, so
    the model's own forward, including anything it does after the head, runs unchanged.
    """
    head = model.get_output_embeddings()  # type: ignore[operator]
    if head is None:
        raise TypeError(f"{type(model).__name__} has no output embeddings; use --model hf")
    captured: dict[str, torch.Tensor] = {}

    def gather(_module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        hidden = args[0]
        idx = positions.to(hidden.device)
        rows = torch.arange(hidden.shape[0], device=hidden.device).unsqueeze(1)
        kept = hidden[rows, idx]
        captured["hidden"] = kept
        return (kept, *args[1:])

    handle = head.register_forward_pre_hook(gather)
    try:
        yield captured
    finally:
        handle.remove()


@register_model("debiased_hf")
class DebiasedHFLM(HFLM):
    """HFLM with a last-position fast path for single-token continuations.

    Extra model args: none yet beyond HFLM's; ``pretrained`` also accepts the offline aliases of
    :mod:`lm_eval_robust.offline_models` (``gemma-3-270m``, the default).
    """

    def __init__(self, pretrained: Any = "gemma-3-270m", **kwargs: Any) -> None:
        if isinstance(pretrained, str):
            pretrained = resolve_pretrained(pretrained)
            if "tokenizer" not in kwargs:
                kwargs["tokenizer"] = pretrained
        super().__init__(pretrained=pretrained, **kwargs)

    # ------------------------------------------------------------------ log-likelihood
    #: continuations up to this many tokens take the last-positions path
    max_fast_tokens: int = 4

    def loglikelihood(
        self, requests: list[Any], disable_tqdm: bool = False
    ) -> list[tuple[float, bool]]:
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        fast: list[tuple[int, tuple[int, ...], list[int]]] = []
        slow: list[int] = []
        ours: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(dict)
        for i, req in enumerate(requests):
            context, continuation = req.args
            if not context or self.backend != "causal":
                slow.append(i)
                continue
            ctx_enc, cont_enc = self._encode_pair(context, continuation)
            if _is_ours(req):
                ours[(str(req.task_name), int(req.doc_id))][continuation] = cont_enc
            if 1 <= len(cont_enc) <= self.max_fast_tokens:
                # the harness's input window: the last max_length tokens of ctx+cont[:-1]
                inp = tuple((ctx_enc + cont_enc)[-(self.max_length + 1) :][:-1])
                fast.append((i, inp, cont_enc))
            else:
                slow.append(i)
        for (task, _doc), labels in sorted(ours.items()):
            check_label_tokens(task, labels)
        if slow:
            slow_res = super().loglikelihood([requests[i] for i in slow], disable_tqdm=disable_tqdm)
            for i, r in zip(slow, slow_res, strict=True):
                results[i] = r
        if fast:
            for i, r in self._last_positions_loglikelihood(fast, disable_tqdm):
                results[i] = r
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def _fast_batch_size(self) -> int:
        bs = self.batch_size
        return int(bs) if str(bs).isdigit() and int(bs) > 0 else 16

    def _last_positions_loglikelihood(
        self, fast: Sequence[tuple[int, tuple[int, ...], list[int]]], disable_tqdm: bool
    ) -> Iterator[tuple[int, tuple[float, bool]]]:
        # One forward row per distinct input, as the harness's logits cache does for choices
        # that share a context; the head runs on the last few positions only.
        by_inp: dict[tuple[int, ...], list[tuple[int, list[int]]]] = defaultdict(list)
        for i, inp, cont in fast:
            by_inp[inp].append((i, cont))
        inputs = sorted(by_inp, key=lambda c: (-len(c), c))
        bs = self._fast_batch_size()
        bar = tqdm(
            total=len(inputs),
            disable=disable_tqdm or self.rank != 0,
            desc="debiased_hf: last-position log-likelihoods",
        )
        for start in range(0, len(inputs), bs):
            chunk = inputs[start : start + bs]
            n_keep = max(len(cont) for inp in chunk for _, cont in by_inp[inp])
            logprobs = self._forward_last(chunk, n_keep)  # [batch, n_keep, vocab]
            greedy = logprobs.argmax(dim=-1)
            for row, inp in enumerate(chunk):
                for i, cont in by_inp[inp]:
                    n = len(cont)
                    toks = torch.tensor(cont, dtype=torch.long, device=logprobs.device)
                    lp = logprobs[row, n_keep - n :, :].gather(-1, toks.unsqueeze(-1)).sum()
                    is_greedy = bool((greedy[row, n_keep - n :] == toks).all())
                    yield i, (float(lp), is_greedy)
            bar.update(len(chunk))
        bar.close()

    def _forward_last(self, inputs: Sequence[tuple[int, ...]], n_keep: int) -> torch.Tensor:
        """Log-softmax at the last ``n_keep`` positions of each input: [batch, n_keep, vocab]."""
        width = max(len(c) for c in inputs)
        inps = torch.zeros((len(inputs), width), dtype=torch.long, device=self.device)
        for row, inp in enumerate(inputs):  # right padding with 0, as the harness does
            inps[row, : len(inp)] = torch.tensor(inp, dtype=torch.long)
        ends = torch.tensor([len(c) for c in inputs], dtype=torch.long)
        positions = (ends.unsqueeze(1) - n_keep + torch.arange(n_keep)).clamp(min=0)
        with last_positions_head(self.model, positions):
            logits = self._model_call(inps)  # [batch, n_keep, vocab]
        return F.log_softmax(logits, dim=-1, dtype=self.softmax_dtype)


def _is_ours(req: Any) -> bool:
    doc = getattr(req, "doc", None)
    return isinstance(doc, dict) and "pert_id" in doc and "choices" in doc and "labels" in doc


def check_label_tokens(task: str, labels: dict[str, list[int]]) -> None:
    """The labels of one doc must differ in exactly one token, their last.

    A shared leading piece is allowed (Gemma writes " 1" as "▁" + "1"): it is part of the answer
    cue, scored identically for every label, and the label logit is the next token's.
    """
    encs = sorted(labels.items())
    prefixes = {tuple(toks[:-1]) for _, toks in encs}
    lasts = [toks[-1] for _, toks in encs if toks]
    if any(not toks for _, toks in encs) or len(prefixes) > 1 or len(set(lasts)) != len(lasts):
        desc = ", ".join(f"{k!r} -> {v}" for k, v in encs)
        raise LabelTokenError(
            f"task {task}: labels must differ in a single token for this tokenizer, but they "
            f"encode as {desc}; declare a verbalizer that scores one distinct token per label"
        )
