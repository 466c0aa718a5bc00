"""Shared-prefix KV caching for the last-positions fast path of ``debiased_hf``.

Every prompt of one of our tasks rendered in one format starts with the same Definition and
demonstrations (hundreds of tokens); only the query differs. :func:`forward_last_cached` returns
what ``DebiasedHFLM._forward_last`` returns (the logits and the LM head's input at each input's
last ``n_keep`` positions) but runs each shared prefix once, with ``use_cache=True``, and then only
the suffixes, batched, on a copy of the prefix's cache expanded to the batch.

* Grouping (:func:`group_by_prefix`): inputs are sorted as token tuples, so inputs sharing a prefix
  are neighbours; the longest common prefixes of neighbours define a tree of runs, and the runs
  kept as groups maximise the prefix tokens saved, ``(members - 1) * prefix_len`` summed. A group
  needs ``min_group`` members and a prefix of ``min_prefix`` tokens that ends at least ``n_keep``
  tokens before every member's end (the scored positions are computed by the suffix pass). The
  rest take the plain path (one full forward, as ``_forward_last``).
* Caches are keyed by the exact prefix tokens, at most ``max_cached_prefixes`` alive, evicted
  least recently used first. Each suffix batch runs on ``copy.deepcopy`` of the stored cache
  (expanded with ``batch_repeat_interleave``), so a forward never changes a stored prefix.
* Positions continue after the prefix (``position_ids = P + arange``); suffixes are right-padded
  with 0 and run without an attention mask, as the harness does (the causal mask keeps padding out
  of every real position).
* Sliding-window (and chunked) attention: transformers' ``DynamicSlidingWindowLayer`` keeps the
  last ``window - 1`` keys of the prefix and offsets its masks by the tokens seen, which is exactly
  what a suffix needs, so prefix + suffix may exceed the window. As a guard against a model or a
  transformers version where a cached forward differs from the plain one, the first cached batch
  of each regime (longest input within the window, or beyond it) is checked against a plain
  forward of one row; a mismatch or an error there turns caching off for that regime (for every
  input when it happens within the window) and is remembered, with the reason, in
  :class:`PrefixCacheStats`. Models without a usable cache (no returned cache, bidirectional
  attention, encoder-decoder) take the plain path throughout.

One concept in one module of a little over 500 lines: the grouping, the cache store, the check
against the plain forward and the batched suffix pass share the cache's state and its guards.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import torch

from lm_eval_robust.scoring.heads import last_positions_head

log = logging.getLogger(__name__)

ContextFactory = Callable[[], AbstractContextManager[Any]]
ModelCall = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class PrefixGroup:
    """Inputs (indices into the grouped sequence) that share ``prefix``.

    The fallback group, for inputs without a useful shared prefix, has ``prefix == ()``; it is the
    last group returned, if any.
    """

    prefix: tuple[int, ...]
    members: tuple[int, ...]

    @property
    def is_fallback(self) -> bool:
        return not self.prefix


@dataclass
class PrefixCacheStats:
    """Counters of a :class:`PrefixCache` (cumulative over its calls)."""

    n_groups: int = 0  # prefix groups run (one per distinct prefix per call)
    n_cached_rows: int = 0  # distinct inputs whose scored positions came from a suffix pass
    n_fallback: int = 0  # distinct inputs that took the plain full forward
    n_prefix_computed: int = 0  # prefix forwards (cache misses)
    n_prefix_hits: int = 0  # groups served from a stored prefix cache
    n_evictions: int = 0
    prefix_tokens_saved: int = 0  # tokens not run: prefix tokens of cached rows - prefixes run
    cache_bytes: int = 0  # bytes of the stored prefix caches now
    peak_cache_bytes: int = 0  # most bytes of stored prefix caches at once
    n_verified: int = 0  # cached batches checked against a plain forward
    disabled_reason: str | None = None  # why caching was turned off (or None)


class _CacheUnusable(RuntimeError):
    """A cached forward that cannot be used, or that differs from the plain forward."""


def inference_context(device_type: str = "cpu", dtype: torch.dtype | None = None) -> ContextFactory:
    """``torch.no_grad()`` plus autocast, as in HFLM's ``_model_call``.

    For ``DebiasedHFLM``: ``inference_context(self.device.type, self.mixed_precision_dtype)``.
    """

    @contextmanager
    def ctx() -> Iterator[None]:
        with (
            torch.no_grad(),
            torch.autocast(device_type=device_type, dtype=dtype, enabled=dtype is not None),
        ):
            yield

    return ctx


# --------------------------------------------------------------------------------- grouping


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def group_by_prefix(
    inputs: Sequence[tuple[int, ...]],
    min_prefix: int = 32,
    min_group: int = 2,
    n_keep: int = 1,
) -> list[PrefixGroup]:
    """Group ``inputs`` by long shared token prefixes; returns groups, then the fallback group.

    Each group's prefix is the longest prefix common to all its members, shortened so it ends at
    least ``n_keep`` tokens before each member's end, and is at least ``min_prefix`` tokens long;
    each group has at least ``min_group`` members (duplicates count). Among the nested runs of
    the sorted inputs, the groups chosen maximise the prefix tokens saved, ``(len(members) - 1) *
    len(prefix)`` summed (ties go to the larger group). Groups come in sorted order of their
    prefixes, members longest first (suffix batches of similar lengths); the fallback group
    (``prefix == ()``) holds every other index, longest first.
    """
    if n_keep < 1:
        raise ValueError(f"n_keep must be >= 1, got {n_keep}")
    n = len(inputs)
    order = sorted(range(n), key=lambda i: inputs[i])
    lcp = [0] * n  # lcp[k]: common prefix of the (k-1)-th and k-th sorted inputs
    for k in range(1, n):
        lcp[k] = _lcp(inputs[order[k - 1]], inputs[order[k]])
    cap = [len(inputs[i]) - n_keep for i in order]

    # the tree of runs: a run splits where its neighbours' common prefix is smallest
    nodes: list[tuple[int, int, int]] = []  # (lo, hi, usable prefix length), parents first
    children: list[list[int]] = []
    stack: list[tuple[int, int, int]] = [(0, n, -1)] if n >= 2 else []
    while stack:
        lo, hi, parent = stack.pop()
        m = min(lcp[lo + 1 : hi])
        node = len(nodes)
        nodes.append((lo, hi, min(m, *cap[lo:hi])))
        children.append([])
        if parent >= 0:
            children[parent].append(node)
        cuts = [lo, *(k for k in range(lo + 1, hi) if lcp[k] == m), hi]
        for a, b in pairwise(cuts):
            if b - a >= 2:
                stack.append((a, b, node))

    best = [0] * len(nodes)
    take = [False] * len(nodes)
    for node in reversed(range(len(nodes))):  # children before parents
        lo, hi, plen = nodes[node]
        useful = hi - lo >= min_group and plen >= max(min_prefix, 1)
        own = (hi - lo - 1) * plen if useful else 0
        below = sum(best[c] for c in children[node])
        take[node] = useful and own >= below
        best[node] = max(own, below)

    groups: list[PrefixGroup] = []
    grouped = [False] * n
    todo = [0] if nodes else []
    while todo:
        node = todo.pop()
        lo, hi, plen = nodes[node]
        if take[node]:
            members = sorted(order[lo:hi], key=lambda i: (-len(inputs[i]), i))
            groups.append(PrefixGroup(tuple(inputs[order[lo]][:plen]), tuple(members)))
            for k in range(lo, hi):
                grouped[k] = True
        else:
            todo.extend(children[node])
    groups.sort(key=lambda g: g.prefix)
    rest = sorted(
        (order[k] for k in range(n) if not grouped[k]), key=lambda i: (-len(inputs[i]), i)
    )
    if rest:
        groups.append(PrefixGroup((), tuple(rest)))
    return groups


# --------------------------------------------------------------------------------- model


def _head_hook(model: torch.nn.Module, positions: torch.Tensor) -> Any:
    return last_positions_head(model, positions)


def _text_config(model: torch.nn.Module) -> tuple[Any, Any]:
    config = getattr(model, "config", None)
    if config is None:
        return None, None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return config, text


def _window(model: torch.nn.Module) -> int | None:
    """The smallest sliding-window / attention-chunk size of the model's layers, if any."""
    _, text = _text_config(model)
    sizes = [
        v
        for name in ("sliding_window", "attention_chunk_size")
        if isinstance(v := getattr(text, name, None), int) and v > 0
    ]
    return min(sizes) if sizes else None


def _unsupported_reason(model: torch.nn.Module) -> str | None:
    config, text = _text_config(model)
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder model"
    if getattr(text, "use_bidirectional_attention", False):
        return "bidirectional attention"
    return None


def _cache_bytes(cache: Any) -> int:
    total = 0
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def _tolerance(model: torch.nn.Module, logits: torch.Tensor) -> float:
    """Relative tolerance of the cached-vs-plain check: tight in float32, loose otherwise."""
    param = next(model.parameters(), None)
    exact = logits.dtype == torch.float32 and (param is None or param.dtype == torch.float32)
    return 1e-3 if exact else 5e-2


def _pad(rows: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):  # right padding with 0, as the harness does
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out.to(device)


class PrefixCache:
    """Prefix KV caches for one model, kept across calls (at most ``max_cached_prefixes``, LRU).

    ``model_call(inps) -> logits`` runs the plain path (HFLM's ``_model_call``; by default
    ``model(inps).logits`` under ``context``); ``context()`` wraps the cached forwards (default
    ``torch.no_grad()``; see :func:`inference_context`). ``verify`` checks the first cached batch
    of each regime against a plain forward of one row.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        model_call: ModelCall | None = None,
        context: ContextFactory | None = None,
        max_cached_prefixes: int = 8,
        min_prefix: int = 32,
        min_group: int = 2,
        verify: bool = True,
    ) -> None:
        if max_cached_prefixes < 1:
            raise ValueError(f"max_cached_prefixes must be >= 1, got {max_cached_prefixes}")
        self.model = model
        self.context: ContextFactory = context or torch.no_grad
        self._model_call = model_call
        self.max_cached_prefixes = max_cached_prefixes
        self.min_prefix = min_prefix
        self.min_group = min_group
        self.verify = verify
        self.window = _window(model)
        self.stats = PrefixCacheStats()
        self._store: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._planned: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._ok: set[str] = set()  # regimes whose first cached batch ran (and matched)
        self._disabled: set[str] = set()  # "long" (beyond the window) or "all"
        reason = _unsupported_reason(model)
        if reason is not None:
            self._disable("all", reason)

    # ------------------------------------------------------------------ state
    @property
    def enabled(self) -> bool:
        return "all" not in self._disabled

    @property
    def cached_prefixes(self) -> list[tuple[int, ...]]:
        """The stored prefixes, least recently used first."""
        return list(self._store)

    def clear(self) -> None:
        """Drop every stored cache and the plan (counters and the support verdict are kept)."""
        self._store.clear()
        self._planned.clear()
        self.stats.cache_bytes = 0

    def _disable(self, regime: str, reason: str) -> None:
        regime = "all" if regime == "short" else regime
        self._disabled.add(regime)
        self.stats.disabled_reason = reason
        if regime == "all":
            self.clear()
        log.warning("prefix cache off (%s): %s", regime, reason)

    def _regime(self, total_len: int) -> str:
        return "long" if self.window is not None and total_len > self.window else "short"

    # ------------------------------------------------------------------ planning
    def plan(self, inputs: Sequence[tuple[int, ...]], n_keep: int) -> list[int]:
        """Group all ``inputs`` (replacing any earlier plan); returns an order of their indices.

        Processing the inputs in this order, in chunks, keeps each group's members together, and
        later :meth:`forward_last` calls use these global groups (valid for any ``n_keep`` up to
        the one given) instead of grouping each chunk on its own.
        """
        groups = group_by_prefix(inputs, self.min_prefix, self.min_group, n_keep)
        self._planned = {inputs[i]: g.prefix for g in groups if g.prefix for i in g.members}
        return [i for g in groups for i in g.members]

    # ------------------------------------------------------------------ forward
    def forward_last(
        self, inputs: Sequence[tuple[int, ...]], n_keep: int, batch_size: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and head inputs at each input's last ``n_keep`` positions, in input order.

        Returns ``([len(inputs), n_keep, vocab], [len(inputs), n_keep, hidden])``, as
        ``DebiasedHFLM._forward_last``; at most ``batch_size`` rows per forward (default: all).
        """
        if not inputs:
            raise ValueError("no inputs")
        uniq: dict[tuple[int, ...], int] = {}
        where = [uniq.setdefault(tuple(t), len(uniq)) for t in inputs]
        rows = list(uniq)
        bs = max(1, batch_size or len(rows))
        results: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(rows)

        assigned: dict[tuple[int, ...], list[int]] = {}
        fallback: list[int] = []
        if self.enabled:
            unplanned: list[int] = []
            for j, row in enumerate(rows):
                p = self._planned.get(row)
                if p is not None and len(p) <= len(row) - n_keep and row[: len(p)] == p:
                    assigned.setdefault(p, []).append(j)
                else:
                    unplanned.append(j)
            local = group_by_prefix(
                [rows[j] for j in unplanned], self.min_prefix, self.min_group, n_keep
            )
            for g in local:
                members = [unplanned[m] for m in g.members]
                if g.prefix:
                    assigned.setdefault(g.prefix, []).extend(members)
                else:
                    fallback.extend(members)
        else:
            fallback = list(range(len(rows)))

        for prefix, members in assigned.items():
            members.sort(key=lambda j: (-len(rows[j]), j))
            if not self.enabled:
                fallback.extend(members)
                continue
            self.stats.n_groups += 1
            fallback.extend(self._run_group(prefix, members, rows, n_keep, bs, results))

        fallback.sort(key=lambda j: (-len(rows[j]), j))
        self.stats.n_fallback += len(fallback)
        for start in range(0, len(fallback), bs):
            chunk = fallback[start : start + bs]
            logits, hidden = self._plain([rows[j] for j in chunk], n_keep)
            for b, j in enumerate(chunk):
                results[j] = (logits[b], hidden[b])

        done = [r for r in results if r is not None]
        assert len(done) == len(rows)
        device = done[0][0].device
        out_logits = torch.stack([done[w][0].to(device) for w in where])
        out_hidden = torch.stack([done[w][1].to(device) for w in where])
        return out_logits, out_hidden

    def _device(self) -> torch.device:
        param = next(self.model.parameters(), None)
        return param.device if param is not None else torch.device("cpu")

    def _plain(
        self, rows: Sequence[tuple[int, ...]], n_keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``DebiasedHFLM._forward_last``: one full forward, head on the last positions."""
        inps = _pad(rows, self._device())
        ends = torch.tensor([len(r) for r in rows], dtype=torch.long)
        positions = (ends.unsqueeze(1) - n_keep + torch.arange(n_keep)).clamp(min=0)
        with _head_hook(self.model, positions) as captured:
            if self._model_call is not None:
                logits = self._model_call(inps)
            else:
                with self.context():
                    logits = self.model(inps).logits
        return logits, captured["hidden"]

    def _run_group(
        self,
        prefix: tuple[int, ...],
        members: list[int],
        rows: list[tuple[int, ...]],
        n_keep: int,
        bs: int,
        results: list[tuple[torch.Tensor, torch.Tensor] | None],
    ) -> list[int]:
        """Fill ``results`` of ``members`` from suffix passes on ``prefix``'s cache.

        Returns the members left to the plain path (caching off for their regime).
        """
        left: list[int] = []
        cache = None
        for start in range(0, len(members), bs):
            chunk = members[start : start + bs]
            regime = self._regime(max(len(rows[j]) for j in chunk))
            if not self.enabled or regime in self._disabled:
                left.extend(chunk)
                continue
            trial = regime not in self._ok  # the first cached batch of its regime
            try:
                if cache is None:
                    cache = self._prefix_cache(prefix)
                batch = [rows[j] for j in chunk]
                logits, hidden = self._suffix_forward(cache, prefix, batch, n_keep)
                if trial and self.verify:
                    self.stats.n_verified += 1
                    self._check(batch[0], n_keep, logits[0], hidden[0])
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as err:
                if not trial:
                    raise
                self._disable(regime, f"{type(err).__name__}: {err}")
                left.extend(chunk)
                continue
            self._ok.add(regime)
            for b, j in enumerate(chunk):
                results[j] = (logits[b], hidden[b])
            self.stats.n_cached_rows += len(chunk)
            self.stats.prefix_tokens_saved += len(chunk) * len(prefix)
        return left

    def _check(
        self, row: tuple[int, ...], n_keep: int, logits: torch.Tensor, hidden: torch.Tensor
    ) -> None:
        ref_logits, ref_hidden = self._plain([row], n_keep)
        pairs = (("logits", logits, ref_logits[0]), ("hidden", hidden, ref_hidden[0]))
        for name, got, ref in pairs:
            got32, ref32 = got.float(), ref.float().to(got.device)
            diff = float((got32 - ref32).abs().max())
            scale = float(ref32.abs().max()) + 1.0
            if not diff <= _tolerance(self.model, got) * scale:
                raise _CacheUnusable(
                    f"cached {name} differ from the plain forward by {diff:.3g} (scale {scale:.3g})"
                )

    def _prefix_cache(self, prefix: tuple[int, ...]) -> Any:
        """The stored cache of ``prefix`` (exact tokens), computing and storing it on a miss."""
        cache = self._store.get(prefix)
        if cache is not None:
            self._store.move_to_end(prefix)
            self.stats.n_prefix_hits += 1
            return cache
        ids = torch.tensor([prefix], dtype=torch.long, device=self._device())
        with _head_hook(self.model, torch.tensor([[len(prefix) - 1]])), self.context():
            out = self.model(input_ids=ids, use_cache=True)
        cache = output_cache(out)
        if cache is None or not hasattr(cache, "batch_repeat_interleave"):
            raise _CacheUnusable(f"the model returned no reusable cache ({type(cache).__name__})")
        if cache.get_seq_length() != len(prefix):
            raise _CacheUnusable(
                f"the cache holds {cache.get_seq_length()} tokens for a {len(prefix)}-token prefix"
            )
        self.stats.n_prefix_computed += 1
        self.stats.prefix_tokens_saved -= len(prefix)
        while len(self._store) >= self.max_cached_prefixes:
            _, old = self._store.popitem(last=False)
            self.stats.cache_bytes -= _cache_bytes(old)
            self.stats.n_evictions += 1
        self._store[prefix] = cache
        self.stats.cache_bytes += _cache_bytes(cache)
        self.stats.peak_cache_bytes = max(self.stats.peak_cache_bytes, self.stats.cache_bytes)
        return cache

    def _suffix_forward(
        self, cache: Any, prefix: tuple[int, ...], rows: Sequence[tuple[int, ...]], n_keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``rows[b][len(prefix):]`` on a private copy of ``cache``, expanded to the batch."""
        p = len(prefix)
        suffixes = [r[p:] for r in rows]
        if any(len(s) < n_keep for s in suffixes):
            raise ValueError(f"a prefix of {p} tokens leaves fewer than {n_keep} tokens to score")
        device = self._device()
        inps = _pad(suffixes, device)
        ends = torch.tensor([len(s) for s in suffixes], dtype=torch.long)
        positions = ends.unsqueeze(1) - n_keep + torch.arange(n_keep)
        pos_ids = (p + torch.arange(inps.shape[1], device=device)).unsqueeze(0)
        past = copy.deepcopy(cache)  # never let this forward touch the stored prefix
        if len(rows) > 1:
            past.batch_repeat_interleave(len(rows))
        with _head_hook(self.model, positions) as captured, self.context():
            out = self.model(
                input_ids=inps,
                use_cache=True,
                position_ids=pos_ids.expand(len(rows), -1),
                **{cache_argument(self.model): past},
            )
        return out.logits, captured["hidden"]


def cache_argument(model: torch.nn.Module) -> str:
    """The forward's name for a cache passed in: ``cache`` in transformers 5.2x, where
    ``past_key_values`` still works but warns at every call; ``past_key_values`` before."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def output_cache(out: Any) -> Any:
    """The cache a forward returned, under either of its names (``cache`` where the output type
    has it, so the deprecated alias and its warning are not touched)."""
    if hasattr(type(out), "cache"):
        return getattr(out, "cache", None)
    return getattr(out, "past_key_values", None)


def forward_last_cached(
    model: torch.nn.Module,
    inputs: Sequence[tuple[int, ...]],
    n_keep: int,
    batch_size: int,
    model_call: ModelCall | None = None,
    max_cached_prefixes: int = 8,
    *,
    context: ContextFactory | None = None,
    min_prefix: int = 32,
    min_group: int = 2,
    cache: PrefixCache | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_forward_last(inputs, n_keep)`` with each shared prefix run once.

    Returns ``([len(inputs), n_keep, vocab], [len(inputs), n_keep, hidden])`` in input order.
    Pass ``cache`` (a :class:`PrefixCache`) to keep prefix caches, the cache-support verdict and
    the counters across calls; without one, a fresh one is made from the other arguments.
    """
    if cache is None:
        cache = PrefixCache(
            model,
            model_call=model_call,
            context=context,
            max_cached_prefixes=max_cached_prefixes,
            min_prefix=min_prefix,
            min_group=min_group,
        )
    return cache.forward_last(inputs, n_keep, batch_size)
