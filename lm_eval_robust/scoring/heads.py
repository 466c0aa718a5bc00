"""The output layer seen from below: last-position logits and the label-token check.

Shared by ``debiased_hf`` (:mod:`lm_eval_robust.scoring.model`), the prefix cache and LoRA training,
so none of them imports another for it. Nothing here knows the harness.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from lm_eval_robust.base.errors import UserError

__all__ = ["LabelTokenError", "check_label_tokens", "last_positions_head"]


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
