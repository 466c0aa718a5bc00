"""Decoder layers of a causal LM: last-prompt-token states, and the debiasing hook context.

Layer ``L`` is decoder block ``L`` (0-based, ``0 ≤ L < num_layers``); its *state* is the block's
output hidden state (the residual stream after the block). :func:`sweep_layers` gives the
issue's sweep: the first, a quarter, half and the last block.

States are read and edited at the same place, a forward hook on block ``L``. Prompts are left
padded (as the harness's ``generate_until`` pads them) with position ids counted from each row's
first real token (as ``generate`` computes them), so the last position of every row is its last
prompt token and the collected states equal those seen during generation.

:func:`layer_debias` edits, during ``generate``, the state of the last prompt token (the prefill
call, ``positions="prompt"``), of every generated token (decoding calls, ``"generated"``), or
both (``"all"``). A prefill call is one with more than one new position; a one-token prompt
therefore counts as a decoding step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from lm_eval_robust.base.errors import UserError

__all__ = [
    "POSITIONS",
    "LayerError",
    "collect_last_states",
    "decoder_layers",
    "layer_debias",
    "resolve_layers",
    "sweep_layers",
]

POSITIONS = ("prompt", "generated", "all")


class LayerError(UserError):
    """A layer index or layer setting that cannot be used."""


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder blocks of a HF causal LM (``model.model.layers`` and the like)."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    get_decoder = getattr(model, "get_decoder", None)
    candidates: list[Any] = []
    if callable(get_decoder):
        candidates.append(getattr(get_decoder(), "layers", None))
    candidates += [getattr(getattr(model, "model", None), "layers", None)]
    candidates += [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    for c in candidates:
        if isinstance(c, torch.nn.ModuleList) and len(c) > 0 and (n is None or len(c) == n):
            return c
    raise LayerError(
        f"cannot find the decoder layers of {type(model).__name__}; intermediate-layer "
        "debiasing supports HF decoder-only models with model.layers"
    )


def sweep_layers(num_layers: int) -> list[int]:
    """First, a quarter, half and the last block (deduplicated, in order)."""
    return sorted({0, num_layers // 4, num_layers // 2, num_layers - 1})


def resolve_layers(spec: str | int | Sequence[int], num_layers: int) -> list[int]:
    """Layers from ``"sweep"``, ``"9"``, ``"0,4,9"`` or ints (0-based; negative ones refused)."""
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text == "sweep":
            return sweep_layers(num_layers)
        try:
            items = [int(p) for p in text.split(",") if p.strip()]
        except ValueError:
            items = []
        if not items:
            raise LayerError(
                f"--layer must be an integer, a comma list or 'sweep', got {spec!r}; e.g. "
                f"--layer {num_layers // 2}"
            )
    elif isinstance(spec, int):
        items = [spec]
    else:
        items = [int(v) for v in spec]
    out: list[int] = []
    for v in items:
        idx = v
        if v < 0:
            raise LayerError(
                f"layer {v} is negative; give a decoder layer between 0 and {num_layers - 1} "
                "(0-based, counted from the input) or 'sweep'"
            )
        if not 0 <= idx < num_layers:
            raise LayerError(
                f"layer {v} does not exist: the model has {num_layers} decoder layers (0.."
                f"{num_layers - 1}); pass --layer between 0 and {num_layers - 1} or 'sweep'"
            )
        if idx not in out:
            out.append(idx)
    return out


def _hidden_of(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def _with_hidden(output: Any, hidden: torch.Tensor) -> Any:
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


class _Stop(Exception):
    """Raised by the deepest collection hook: later layers are not needed."""


def left_padded(
    token_lists: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``input_ids``, ``attention_mask`` and generation-style ``position_ids``, left padded."""
    width = max(len(t) for t in token_lists)
    ids = torch.full((len(token_lists), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(token_lists), width), dtype=torch.long)
    for i, toks in enumerate(token_lists):
        if toks:
            ids[i, width - len(toks) :] = torch.tensor(list(toks), dtype=torch.long)
            mask[i, width - len(toks) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), pos.to(device)


@torch.inference_mode()
def collect_last_states(
    model: torch.nn.Module,
    token_lists: Sequence[Sequence[int]],
    layers: Sequence[int],
    *,
    pad_id: int,
    batch_size: int = 8,
    desc: str = "layer states",
    disable_tqdm: bool = False,
) -> dict[int, np.ndarray]:
    """float32 ``[n_prompts, hidden]`` states of each prompt's last token at each layer.

    Prompts are run longest first in left-padded batches; the forward stops after the deepest
    requested layer. Non-finite states are a :class:`LayerError`.
    """
    if not token_lists:
        raise LayerError("no prompts to collect layer states from")
    blocks = decoder_layers(model)
    deepest = max(layers)
    out: dict[int, list[np.ndarray | None]] = {L: [None] * len(token_lists) for L in layers}
    current: list[int] = []
    handles = []

    def make_hook(L: int) -> Callable[..., None]:
        def hook(_m: torch.nn.Module, _a: Any, output: Any) -> None:
            h = _hidden_of(output)[:, -1, :].detach().float().cpu().numpy()
            for row, idx in enumerate(current):
                out[L][idx] = h[row]
            if L == deepest:
                raise _Stop

        return hook

    for L in layers:
        handles.append(blocks[L].register_forward_hook(make_hook(L)))
    order = sorted(range(len(token_lists)), key=lambda i: -len(token_lists[i]))
    device = next(model.parameters()).device
    try:
        for start in tqdm(
            range(0, len(order), batch_size), desc=desc, disable=disable_tqdm, leave=False
        ):
            current[:] = order[start : start + batch_size]
            ids, mask, pos = left_padded([token_lists[i] for i in current], pad_id, device)
            try:
                model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
            except _Stop:
                pass
    finally:
        for h in handles:
            h.remove()
    result: dict[int, np.ndarray] = {}
    for L in layers:
        arr = np.stack([v for v in out[L] if v is not None])
        if arr.shape[0] != len(token_lists) or not np.isfinite(arr).all():
            raise LayerError(
                f"non-finite (or missing) hidden states at layer {L}; run the model in float32 "
                "(--model-args dtype=float32) or check the checkpoint"
            )
        result[L] = arr
    return result


EditFn = Callable[[torch.Tensor], torch.Tensor]


@contextmanager
def layer_debias(
    model: torch.nn.Module, layer: int, edit: EditFn, positions: str = "prompt"
) -> Iterator[dict[str, int]]:
    """Apply ``edit`` (``[rows, hidden] -> new [rows, hidden]``) to block ``layer``'s output.

    A forward hook on the block, on the block's device, removed on exit (also on an exception),
    so nothing stays on the model. ``positions``: ``"prompt"`` edits the last position of
    prefill calls (the last prompt token; prompts are left padded), ``"generated"`` the position
    of decoding calls (one new token each), ``"all"`` both. Yields counters of edited rows
    (``{"prompt": n, "generated": m}``).
    """
    if positions not in POSITIONS:
        raise LayerError(f"unknown positions {positions!r}; use one of {', '.join(POSITIONS)}")
    blocks = decoder_layers(model)
    if not 0 <= layer < len(blocks):
        raise LayerError(
            f"layer {layer} does not exist: the model has {len(blocks)} decoder layers; fit the "
            "correction for this model"
        )
    counts = {"prompt": 0, "generated": 0}

    def hook(_m: torch.nn.Module, _a: Any, output: Any) -> Any:
        hidden = _hidden_of(output)
        prefill = hidden.shape[1] > 1
        which = "prompt" if prefill else "generated"
        if positions not in (which, "all"):
            return None
        new = hidden.clone()
        new[:, -1, :] = edit(hidden[:, -1, :]).to(dtype=hidden.dtype, device=hidden.device)
        counts[which] += hidden.shape[0]
        return _with_hidden(output, new)

    handle = blocks[layer].register_forward_hook(hook)
    try:
        yield counts
    finally:
        handle.remove()


def encode_prompts(lm: Any, prompts: list[str], max_gen_toks: int) -> list[list[int]]:
    """Token ids of each prompt exactly as ``HFLM.generate_until`` feeds them to ``generate``."""
    max_ctx = int(lm.max_length) - max_gen_toks
    out: list[list[int]] = []
    for p in prompts:
        ids, mask = lm.tok_batch_encode([p], left_truncate_len=max_ctx, truncation=lm.truncation)
        out.append([int(t) for t, m in zip(ids[0].tolist(), mask[0].tolist(), strict=True) if m])
    return out
