"""Shared-prefix KV caching: grouping, parity with the plain last-positions forward, cache keying,
eviction and the fallbacks, on tiny random Llama and Gemma 3 (sliding-window) models."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from lm_eval_robust.scoring.prefix_cache import PrefixCache, forward_last_cached, group_by_prefix

VOCAB = 300
WINDOW = 16


def _llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).float().eval()


def _gemma() -> torch.nn.Module:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        max_position_embeddings=512,
        final_logit_softcapping=30.0,
    )
    torch.manual_seed(0)
    return Gemma3ForCausalLM(config).float().eval()


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Any:
    """Tiny models: threads only add overhead (and the CI machine is small)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def llama() -> torch.nn.Module:
    return _llama()


@pytest.fixture(scope="module")
def gemma() -> torch.nn.Module:
    return _gemma()


def _plain(model: torch.nn.Module, inputs: list[tuple[int, ...]], n_keep: int) -> Any:
    """``DebiasedHFLM._forward_last``, written out: one padded batch, no attention mask."""
    from lm_eval_robust.scoring.model import last_positions_head

    width = max(len(c) for c in inputs)
    inps = torch.zeros((len(inputs), width), dtype=torch.long)
    for row, inp in enumerate(inputs):
        inps[row, : len(inp)] = torch.tensor(inp, dtype=torch.long)
    ends = torch.tensor([len(c) for c in inputs], dtype=torch.long)
    positions = (ends.unsqueeze(1) - n_keep + torch.arange(n_keep)).clamp(min=0)
    with last_positions_head(model, positions) as captured, torch.no_grad():
        logits = model(inps).logits
    return logits, captured["hidden"]


def _toks(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(1, VOCAB) for _ in range(n))


def _family(rng: random.Random, prefix: tuple[int, ...], lengths: list[int]) -> list[tuple]:
    return [prefix + _toks(rng, n) for n in lengths]


def _mixed_inputs(seed: int = 0) -> list[tuple[int, ...]]:
    """Families with prefixes of 6, 20 and 45 tokens (window 16), a duplicate, unique inputs."""
    rng = random.Random(seed)
    inputs: list[tuple[int, ...]] = []
    suffixes = {6: [2, 4, 7, 9, 20], 20: [2, 5, 11, 3, 25], 45: [2, 8, 3, 17, 6]}
    for plen, lengths in suffixes.items():
        inputs += _family(rng, _toks(rng, plen), lengths)
    inputs.append(inputs[3])
    inputs += [_toks(rng, n) for n in (3, 17, 30)]
    rng.shuffle(inputs)
    return inputs


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-4) -> bool:
    return a.shape == b.shape and bool((a - b).abs().max() <= atol)


# --------------------------------------------------------------------------------- grouping


def test_group_basic_and_fallback() -> None:
    p, q = (1, 2, 3, 4, 5), (7, 8, 9, 10, 11)
    inputs = [(*p, 20, 21), (9, 9, 9), (*p, 30), (*q, 5, 6)]
    groups = group_by_prefix(inputs, min_prefix=3)
    assert [(g.prefix, g.members) for g in groups] == [(p, (0, 2)), ((), (3, 1))]
    assert groups[-1].is_fallback and not groups[0].is_fallback


def test_group_prefix_leaves_n_keep_tokens() -> None:
    p = tuple(range(1, 11))
    assert group_by_prefix([(*p, 50), (*p, 60)], min_prefix=3)[0].prefix == p
    assert group_by_prefix([(*p, 50), (*p, 60)], min_prefix=3, n_keep=2)[0].prefix == p[:9]
    # an input that is a prefix of another (or a duplicate) still keeps its scored token(s)
    groups = group_by_prefix([p, (*p, 7, 8)], min_prefix=3)
    assert groups[0].prefix == p[:9] and set(groups[0].members) == {0, 1}
    assert group_by_prefix([p, p], min_prefix=3, n_keep=3)[0].prefix == p[:7]
    # too short once capped: fallback
    assert group_by_prefix([p, (*p, 7)], min_prefix=10)[0].is_fallback


def test_group_chooses_the_saving_split() -> None:
    rng = random.Random(1)
    c, d = _toks(rng, 10), _toks(rng, 20)
    a, b = c + d + (1,), c + d + (2,)
    others = [(*c, 200 + i, *_toks(rng, 20)) for i in range(3)]
    # {a, b} share 30 tokens, all share 10: with one other input, (2-1)*30 > (3-1)*10
    groups = group_by_prefix([a, b, others[0]], min_prefix=5)
    assert groups[0].prefix == c + d and set(groups[0].members) == {0, 1}
    assert groups[1].is_fallback and groups[1].members == (2,)
    # with three others, (5-1)*10 > (2-1)*30: one group of five on the 10 shared tokens
    groups = group_by_prefix([a, b, *others], min_prefix=5)
    assert len(groups) == 1 and groups[0].prefix == c and len(groups[0].members) == 5
    # min_group and min_prefix
    assert group_by_prefix([a, b, others[0]], min_prefix=5, min_group=3)[0].prefix == c
    assert group_by_prefix([a, b], min_prefix=31)[0].is_fallback


def test_group_invariants_random() -> None:
    rng = random.Random(2)
    heads = [_toks(rng, n) for n in (4, 12, 40)]
    inputs = [
        rng.choice(heads)[: rng.randint(0, 40)] + _toks(rng, rng.randint(0, 8)) for _ in range(80)
    ]
    inputs = [t for t in inputs if t]
    for n_keep in (1, 2):
        groups = group_by_prefix(inputs, min_prefix=6, min_group=2, n_keep=n_keep)
        seen = sorted(i for g in groups for i in g.members)
        assert seen == list(range(len(inputs)))
        assert not any(g.is_fallback for g in groups[:-1])
        for g in groups:
            if g.is_fallback:
                continue
            assert len(g.members) >= 2 and len(g.prefix) >= 6
            members = [inputs[i] for i in g.members]
            assert all(m[: len(g.prefix)] == g.prefix for m in members)
            assert all(len(g.prefix) <= len(m) - n_keep for m in members)
            # the longest common prefix (capped): one more token would break it
            longer = len(g.prefix) + 1
            assert (
                any(len(m) - n_keep < longer for m in members)
                or len({m[:longer] for m in members}) > 1
            )
            assert [len(m) for m in members] == sorted((len(m) for m in members), reverse=True)


# --------------------------------------------------------------------------------- parity


@pytest.mark.parametrize("which", ["llama", "gemma"])
@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("n_keep", [1, 2])
def test_parity_with_plain_forward(
    which: str, batch_size: int, n_keep: int, request: pytest.FixtureRequest
) -> None:
    model = request.getfixturevalue(which)
    inputs = _mixed_inputs()
    ref_logits, ref_hidden = _plain(model, inputs, n_keep)
    pc = PrefixCache(model, min_prefix=4, verify=False)
    logits, hidden = forward_last_cached(model, inputs, n_keep, batch_size, cache=pc)
    assert _close(logits, ref_logits) and _close(hidden, ref_hidden)
    st = pc.stats
    assert st.disabled_reason is None
    assert st.n_groups == 3 and st.n_prefix_computed == 3 and st.n_fallback == 3
    assert st.n_cached_rows == 15 and st.prefix_tokens_saved == 4 * (6 + 20 + 45)
    assert st.peak_cache_bytes > 0
    if which == "gemma":  # prefixes and totals on both sides of the sliding window
        assert pc.window == WINDOW and max(len(t) for t in inputs) > 3 * WINDOW
    # verification on: same results, both regimes checked and kept on
    pc2 = PrefixCache(model, min_prefix=4)
    logits2, _ = pc2.forward_last(inputs, n_keep, batch_size)
    assert _close(logits2, ref_logits) and pc2.stats.disabled_reason is None
    assert pc2.stats.n_verified == (2 if which == "gemma" else 1)


def test_gemma_long_prefix_short_suffix(gemma: torch.nn.Module) -> None:
    """A prefix several windows long, suffixes of 1 to 3 tokens (the labels-only case)."""
    rng = random.Random(3)
    prefix = _toks(rng, 5 * WINDOW + 3)
    inputs = _family(rng, prefix, [1, 2, 3, 1])
    ref_logits, ref_hidden = _plain(gemma, inputs, 1)
    pc = PrefixCache(gemma, min_prefix=4, verify=False)
    logits, hidden = pc.forward_last(inputs, 1, batch_size=4)
    assert _close(logits, ref_logits) and _close(hidden, ref_hidden)
    assert pc.stats.n_cached_rows == 4 and pc.cached_prefixes == [prefix]


def test_plan_keeps_groups_across_chunks(llama: torch.nn.Module) -> None:
    inputs = _mixed_inputs(seed=4)
    pc = PrefixCache(llama, min_prefix=4, verify=False)
    order = pc.plan(inputs, n_keep=2)
    assert sorted(order) == list(range(len(inputs)))
    chunks = [[inputs[i] for i in order[s : s + 2]] for s in range(0, len(order), 2)]
    for chunk in chunks:  # chunk by chunk, as DebiasedHFLM's loop calls _forward_last
        logits, hidden = pc.forward_last(chunk, n_keep=1)
        ref_logits, ref_hidden = _plain(llama, chunk, 1)
        assert _close(logits, ref_logits) and _close(hidden, ref_hidden)
    # three prefixes run once each, although their members span several chunks
    assert pc.stats.n_prefix_computed == 3 and pc.stats.n_prefix_hits >= 4


# --------------------------------------------------------------------------------- cache keys


def test_cache_is_keyed_by_exact_prefix(llama: torch.nn.Module) -> None:
    """Prefixes differing in one middle token must not share a cache."""
    rng = random.Random(5)
    a = _toks(rng, 40)
    b = (*a[:20], a[20] % (VOCAB - 1) + 1, *a[21:])
    assert a != b and len(a) == len(b)
    suffixes = [_toks(rng, 6), _toks(rng, 9)]
    in_a = [a + s for s in suffixes]
    in_b = [b + s for s in suffixes]
    pc = PrefixCache(llama, min_prefix=4, verify=False)
    out_a, _ = pc.forward_last(in_a, 1)
    out_b, _ = pc.forward_last(in_b, 1)  # same length, same suffixes: only the key differs
    assert pc.stats.n_prefix_computed == 2 and pc.stats.n_prefix_hits == 0
    assert pc.cached_prefixes == [a, b]
    ref_b, _ = _plain(llama, in_b, 1)
    assert _close(out_b, ref_b)
    # what reusing a's cache for b would give: the test above would see it
    wrong, _ = pc._suffix_forward(pc._store[a], a, in_b, 1)
    assert not _close(wrong, ref_b, atol=1e-3)
    assert _close(wrong, out_a)
    # both groups in one call
    pc2 = PrefixCache(llama, min_prefix=4, verify=False)
    both, _ = pc2.forward_last(in_a + in_b, 1)
    assert _close(both[2:], ref_b) and pc2.stats.n_prefix_computed == 2


def test_stored_prefix_is_not_mutated(gemma: torch.nn.Module) -> None:
    rng = random.Random(6)
    prefix = _toks(rng, 2 * WINDOW)
    inputs = _family(rng, prefix, [5, 30, 7])
    pc = PrefixCache(gemma, min_prefix=4, verify=False)
    first, _ = pc.forward_last(inputs, 1, batch_size=2)
    stored = pc._store[prefix]
    snap = [(layer.keys.clone(), layer.values.clone()) for layer in stored.layers]
    seq = stored.get_seq_length()
    again, _ = pc.forward_last(inputs, 1, batch_size=3)
    assert pc.stats.n_prefix_hits == 1 and stored.get_seq_length() == seq == len(prefix)
    for layer, (k, v) in zip(stored.layers, snap, strict=True):
        assert torch.equal(layer.keys, k) and torch.equal(layer.values, v)
    assert _close(first, again)


# --------------------------------------------------------------------------------- eviction


def test_lru_eviction(llama: torch.nn.Module) -> None:
    rng = random.Random(7)
    prefixes = [_toks(rng, 24) for _ in range(4)]
    fams = [_family(rng, p, [3, 5]) for p in prefixes]
    pc = PrefixCache(llama, max_cached_prefixes=2, min_prefix=4, verify=False)
    a, b, c, d = prefixes
    # LRU, least recently used first: a, used again after b, outlives b (FIFO would drop a)
    expected = {0: [a], 1: [a, b], 2: [b, a], 3: [a, c], 4: [c, d]}
    for step, i in enumerate((0, 1, 0, 2, 3)):
        logits, _ = pc.forward_last(fams[i], 1)
        assert _close(logits, _plain(llama, fams[i], 1)[0])
        assert pc.cached_prefixes == expected[step]
    assert pc.stats.n_prefix_hits == 1 and pc.stats.n_evictions == 2
    one = pc.stats.peak_cache_bytes // 2
    assert one > 0 and pc.stats.cache_bytes == pc.stats.peak_cache_bytes == 2 * one


# --------------------------------------------------------------------------------- fallbacks


def test_unique_inputs_take_the_plain_path(llama: torch.nn.Module) -> None:
    rng = random.Random(8)
    inputs = [_toks(rng, n) for n in (40, 35, 50, 12)]
    pc = PrefixCache(llama, min_prefix=4)
    logits, hidden = pc.forward_last(inputs, 2, batch_size=3)
    ref_logits, ref_hidden = _plain(llama, inputs, 2)
    assert _close(logits, ref_logits) and _close(hidden, ref_hidden)
    assert pc.stats.n_fallback == 4 and pc.stats.n_groups == 0 and not pc.cached_prefixes


class _NoCache(torch.nn.Module):
    """A causal LM whose forward takes no cache arguments."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.calls: list[set[str]] = []

    def get_output_embeddings(self) -> Any:
        return self.inner.get_output_embeddings()

    def forward(self, input_ids: torch.Tensor) -> Any:
        self.calls.append(set())
        return self.inner(input_ids)


class _IgnoresPast(_NoCache):
    """Returns a cache but ignores the one it is given: cached results would be wrong."""

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        self.calls.append(set(kwargs))
        return self.inner(input_ids, use_cache=bool(kwargs.get("use_cache")))


@pytest.mark.parametrize("wrapper", [_NoCache, _IgnoresPast])
def test_unusable_cache_is_detected_once(llama: torch.nn.Module, wrapper: type) -> None:
    model = wrapper(llama)
    rng = random.Random(9)
    inputs = _family(rng, _toks(rng, 30), [4, 6, 8])
    pc = PrefixCache(model, min_prefix=4)
    logits, hidden = pc.forward_last(inputs, 1, batch_size=2)
    ref_logits, ref_hidden = _plain(llama, inputs, 1)
    assert _close(logits, ref_logits) and _close(hidden, ref_hidden)
    assert not pc.enabled and pc.stats.disabled_reason
    assert ("TypeError" in pc.stats.disabled_reason) == (wrapper is _NoCache)
    n = len(model.calls)
    logits, _ = pc.forward_last(inputs, 1, batch_size=2)  # remembered: plain forwards only
    assert _close(logits, ref_logits)
    assert len(model.calls) == n + 2 and all(not c for c in model.calls[n:])


def test_cache_argument_follows_the_forward_signature() -> None:
    import torch

    from lm_eval_robust.scoring.prefix_cache import cache_argument, output_cache

    class New(torch.nn.Module):
        def forward(self, input_ids: Any = None, cache: Any = None) -> None: ...

    class Old(torch.nn.Module):
        def forward(self, input_ids: Any = None, past_key_values: Any = None) -> None: ...

    assert cache_argument(New()) == "cache"
    assert cache_argument(Old()) == "past_key_values"

    class OutNew:
        cache = "c"

    class OutOld:
        past_key_values = "p"

    assert output_cache(OutNew()) == "c"
    assert output_cache(OutOld()) == "p"
