"""Tests for lm_eval_robust.tasks.perturb.text."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from confusable_homoglyphs.confusables import confusables_data
from hypothesis import given, settings
from hypothesis import strategies as st

from lm_eval_robust.tasks.perturb.rng import seeded_rng
from lm_eval_robust.tasks.perturb.segments import Segment, join
from lm_eval_robust.tasks.perturb.text import (
    MARKUP_WRAPPERS,
    QWERTY_NEIGHBOURS,
    TEXT_PERTURBATIONS,
    ZERO_WIDTH_CHARS,
    TextPerturbConfig,
    confusable,
    confusable_map,
    markup,
    perturb_segments,
    register_text_perturbation,
    remove_zero_width,
    segment_in_scope,
    typo,
    zero_width,
)

REPO = Path(__file__).resolve().parents[1]
KINDS = ("zero_width", "confusable", "markup", "typo")
SAMPLE = "The quick brown fox jumps over the lazy dog 42 times, said Alice."

rates = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
seeds = st.integers(min_value=0, max_value=2**32)
no_zero_width_text = st.text(
    alphabet=st.characters(blacklist_characters="".join(ZERO_WIDTH_CHARS)), max_size=60
)
# Text with none of the characters the markup wrappers are made of.
WRAPPER_CHARS = "*_`~<>/[]"
plain_text = st.text(alphabet=st.characters(blacklist_characters=WRAPPER_CHARS), max_size=60)
ROLES = ("definition", "demo", "query", "query_text", "marker", "cue", "label", "format", "text")
segment_st = st.builds(
    Segment,
    text=st.text(max_size=25),
    protected=st.booleans(),
    role=st.sampled_from(ROLES),
)


def _package_homoglyphs(char: str) -> set[str]:
    return {entry["c"] for entry in confusables_data.get(char, [])}


def _eligible(kind: str, text: str) -> bool:
    """Whether ``kind`` can change ``text`` at all."""
    if kind == "zero_width":
        return any(not unicodedata.category(ch).startswith("M") for ch in text[1:])
    if kind == "confusable":
        return any(ch in confusable_map() for ch in text)
    if kind == "markup":
        return re.search(r"\w", text) is not None
    return any(ch.isalpha() for ch in text)


def _unwrap(text: str) -> str:
    # Longest tokens first so ``**`` goes before ``*`` and ``__`` before ``_``.
    tokens = sorted({t for w in MARKUP_WRAPPERS for t in w.split("{}") if t}, key=len)
    for token in reversed(tokens):
        text = text.replace(token, "")
    return text


# --------------------------------------------------------------------------------------------
# registry and per-kind behaviour


def test_registry_has_the_four_kinds() -> None:
    assert sorted(TEXT_PERTURBATIONS) == sorted(KINDS)
    assert TEXT_PERTURBATIONS["zero_width"] is zero_width
    assert TEXT_PERTURBATIONS["confusable"] is confusable
    assert TEXT_PERTURBATIONS["markup"] is markup
    assert TEXT_PERTURBATIONS["typo"] is typo


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_text_perturbation("typo")(typo)


@pytest.mark.parametrize("kind", KINDS)
def test_kind_changes_text_at_full_rate_and_is_deterministic(kind: str) -> None:
    fn = TEXT_PERTURBATIONS[kind]
    first = fn(SAMPLE, seeded_rng("kind", kind, 7), 1.0)
    second = fn(SAMPLE, seeded_rng("kind", kind, 7), 1.0)
    assert first != SAMPLE
    assert first == second
    outputs = {fn(SAMPLE, seeded_rng("kind", kind, s), 0.5) for s in range(8)}
    assert len(outputs) > 1


@pytest.mark.parametrize("kind", KINDS)
def test_kind_rejects_rate_outside_unit_interval(kind: str) -> None:
    with pytest.raises(ValueError, match=r"rate must be a number in \[0, 1\], got 1.5"):
        TEXT_PERTURBATIONS[kind](SAMPLE, random.Random(0), 1.5)


@pytest.mark.parametrize("kind", ("zero_width", "confusable", "typo"))
def test_rate_zero_changes_nothing(kind: str) -> None:
    assert TEXT_PERTURBATIONS[kind](SAMPLE, random.Random(0), 0.0) == SAMPLE


@pytest.mark.parametrize("kind", KINDS)
def test_empty_text_stays_empty(kind: str) -> None:
    assert TEXT_PERTURBATIONS[kind]("", random.Random(0), 1.0) == ""


# zero-width ---------------------------------------------------------------------------------


@given(text=no_zero_width_text, seed=seeds, rate=rates)
def test_zero_width_removal_gives_back_the_original(text: str, seed: int, rate: float) -> None:
    assert remove_zero_width(zero_width(text, random.Random(seed), rate)) == text


def test_zero_width_at_full_rate_fills_every_gap() -> None:
    out = zero_width("abcd", random.Random(3), 1.0)
    assert len(out) == 7
    assert out[0::2] == "abcd"
    assert all(ch in ZERO_WIDTH_CHARS for ch in out[1::2])


def test_zero_width_does_not_split_combining_marks() -> None:
    text = "cafe\u0301"  # e + COMBINING ACUTE ACCENT
    out = zero_width(text, random.Random(0), 1.0)
    assert out.endswith("e\u0301")
    assert remove_zero_width(out) == text


def test_remove_zero_width_strips_only_those_characters() -> None:
    assert remove_zero_width("a\u200bb\u200cc\u200dd\u2060e\ufeff f\u00a0") == "abcde f\u00a0"


# confusables --------------------------------------------------------------------------------


def test_confusable_map_comes_from_the_package_data() -> None:
    table = confusable_map()
    assert list(table) == sorted(table)
    assert "а" in table["a"]  # CYRILLIC SMALL LETTER A
    assert "ο" in table["o"]  # GREEK SMALL LETTER OMICRON
    for char, glyphs in table.items():
        assert len(char) == 1 and char.isalnum()
        assert glyphs and list(glyphs) == sorted(set(glyphs))
        package = _package_homoglyphs(char)
        for glyph in glyphs:
            assert len(glyph) == 1 and not glyph.isascii() and glyph != char
            assert glyph in package
    assert confusable_map() is confusable_map()  # built once


@given(text=st.text(max_size=60), seed=seeds, rate=rates)
def test_confusable_changes_only_replaced_positions(text: str, seed: int, rate: float) -> None:
    out = confusable(text, random.Random(seed), rate)
    assert len(out) == len(text)
    for before, after in zip(text, out, strict=True):
        if before != after:
            assert after in _package_homoglyphs(before)
            assert after in confusable_map()[before]


def test_confusable_at_full_rate_replaces_every_eligible_char() -> None:
    out = confusable(SAMPLE, random.Random(1), 1.0)
    table = confusable_map()
    for before, after in zip(SAMPLE, out, strict=True):
        assert (after != before) == (before in table)
        assert not after.isspace() or before.isspace()


# markup -------------------------------------------------------------------------------------


@given(text=plain_text, seed=seeds, rate=rates)
def test_markup_unwrapped_equals_original(text: str, seed: int, rate: float) -> None:
    out = markup(text, random.Random(seed), rate)
    assert _unwrap(out) == text
    if any(ch.isalnum() for ch in text):
        assert out != text  # at least one word is wrapped


def test_markup_wrappers_surround_whole_words() -> None:
    out = markup("alpha beta", random.Random(5), 1.0)
    parts = out.split(" ")
    assert len(parts) == 2
    for part, word in zip(parts, ("alpha", "beta"), strict=True):
        assert part in {w.format(word) for w in MARKUP_WRAPPERS}


def test_markup_leaves_text_without_words_alone() -> None:
    assert markup("  ?! -- ", random.Random(0), 1.0) == "  ?! -- "


# typos --------------------------------------------------------------------------------------


def test_qwerty_neighbours_are_symmetric_letters() -> None:
    assert sorted(QWERTY_NEIGHBOURS) == list("abcdefghijklmnopqrstuvwxyz")
    for key, near in QWERTY_NEIGHBOURS.items():
        assert key not in near
        for other in near:
            assert key in QWERTY_NEIGHBOURS[other]
    assert set(QWERTY_NEIGHBOURS["g"]) == set("ftyhbv")


@given(text=st.text(max_size=60), seed=seeds, rate=rates)
def test_typo_touches_letters_only(text: str, seed: int, rate: float) -> None:
    out = typo(text, random.Random(seed), rate)
    letters = sum(ch.isalpha() for ch in text)
    assert abs(len(out) - len(text)) <= letters
    assert [c for c in out if not c.isalpha()] == [c for c in text if not c.isalpha()]


@pytest.mark.parametrize("letter", ["g", "G", "q", "M"])
def test_single_typo_is_neighbour_drop_or_repeat_and_keeps_case(letter: str) -> None:
    near = QWERTY_NEIGHBOURS[letter.lower()]
    allowed = {"", letter * 2} | {n.upper() if letter.isupper() else n for n in near}
    seen = {typo(letter, random.Random(s), 1.0) for s in range(200)}
    assert seen <= allowed
    assert "" in seen and letter * 2 in seen and len(seen) > 2


def test_typo_swap_with_next_letter_happens() -> None:
    seen = {typo("ab", random.Random(s), 1.0) for s in range(300)}
    assert "ba" in seen


def test_typo_on_non_ascii_letters_has_no_substitution() -> None:
    seen = {typo("é", random.Random(s), 1.0) for s in range(100)}
    assert seen == {"", "éé"}


# --------------------------------------------------------------------------------------------
# configuration


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kinds": ("zero_width", "bogus")}, r"unknown text perturbation kind 'bogus'; allowed: "),
        ({"kinds": ()}, "kinds must not be empty"),
        ({"kinds": "typo"}, "kinds must be a sequence of kind names, not the string 'typo'"),
        ({"rate": 0.0}, r"rate must be a number in \(0, 1\], got 0.0"),
        ({"rate": 1.5}, r"rate must be a number in \(0, 1\], got 1.5"),
        ({"rate": float("nan")}, r"rate must be a number in \(0, 1\], got nan"),
        ({"rate": True}, r"rate must be a number in \(0, 1\], got True"),
        ({"weights": (1.0, 2.0)}, "weights has 2 entries but kinds has 4"),
        ({"weights": (1.0, -1.0, 1.0, 1.0)}, "weights must be finite numbers >= 0, got -1.0"),
        ({"weights": (1.0, float("inf"), 1.0, 1.0)}, "weights must be finite numbers >= 0"),
        ({"weights": (0.0, 0.0, 0.0, 0.0)}, "weights must not all be zero"),
        ({"scope": "demos"}, r"unknown scope 'demos'; allowed: all, query"),
    ],
)
def test_invalid_config_raises_value_error_naming_the_problem(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as info:
        TextPerturbConfig(**kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_unknown_kind_message_lists_allowed_kinds() -> None:
    with pytest.raises(ValueError) as info:
        TextPerturbConfig(kinds=("nope",))
    assert "confusable, markup, typo, zero_width" in str(info.value)


def test_config_defaults_and_list_coercion() -> None:
    config = TextPerturbConfig()
    assert config.kinds == KINDS and config.weights is None
    assert config.rate == 0.05 and config.scope == "all"
    coerced = TextPerturbConfig(kinds=["typo", "markup"], weights=[1, 3])  # type: ignore[arg-type]
    assert coerced.kinds == ("typo", "markup") and coerced.weights == (1, 3)
    hash(coerced)  # still hashable (frozen, tuples)


def test_segment_in_scope() -> None:
    assert segment_in_scope(Segment("x", role="demo"), "all")
    assert not segment_in_scope(Segment("x", protected=True, role="query"), "all")
    assert segment_in_scope(Segment("x", role="query"), "query")
    assert segment_in_scope(Segment("x", role="query_text"), "query")
    assert not segment_in_scope(Segment("x", role="text"), "query")
    assert not segment_in_scope(Segment("x", role="demo"), "query")
    with pytest.raises(ValueError, match="unknown scope 'everything'"):
        segment_in_scope(Segment("x"), "everything")


# --------------------------------------------------------------------------------------------
# prompt-level application

PROMPT = [
    Segment("Classify the sentiment of the review.\n\n", role="definition"),
    Segment("Review: I loved every minute of it.\n", role="demo"),
    Segment("Sentiment:", protected=True, role="cue"),
    Segment(" positive", protected=True, role="label"),
    Segment("\n\nReview: The plot dragged and the acting was flat.\n", role="query"),
    Segment("A)", protected=True, role="marker"),
    Segment("Sentiment:", protected=True, role="cue"),
]


@settings(max_examples=150)
@given(
    segments=st.lists(segment_st, max_size=8),
    seed=seeds,
    kind=st.sampled_from(KINDS),
    scope=st.sampled_from(("all", "query")),
    rate=st.floats(min_value=1e-6, max_value=1.0),
)
def test_perturb_segments_keeps_protected_and_out_of_scope_segments(
    segments: list[Segment], seed: int, kind: str, scope: str, rate: float
) -> None:
    config = TextPerturbConfig(kinds=(kind,), rate=rate, scope=scope)
    out, chosen = perturb_segments(segments, config, random.Random(seed))
    assert chosen == kind
    assert len(out) == len(segments)
    for before, after in zip(segments, out, strict=True):
        assert after.protected == before.protected and after.role == before.role
        if not config.in_scope(before):
            assert after is before
            assert after.text.encode("utf-8") == before.text.encode("utf-8")
    # Forced change: the variant differs whenever the kind has an eligible position in scope.
    if any(_eligible(kind, s.text) for s in segments if config.in_scope(s)):
        assert join(out) != join(segments)
    else:
        assert out == segments
    again, _ = perturb_segments(segments, config, random.Random(seed))
    assert again == out


@pytest.mark.parametrize("kind", KINDS)
def test_perturb_segments_always_changes_something(kind: str) -> None:
    config = TextPerturbConfig(kinds=(kind,), rate=1e-9)
    for seed in range(20):
        out, chosen = perturb_segments(PROMPT, config, seeded_rng("force", kind, seed))
        assert chosen == kind
        assert join(out) != join(PROMPT)
        changed = [i for i, (a, b) in enumerate(zip(PROMPT, out, strict=True)) if a != b]
        assert len(changed) == 1 and not PROMPT[changed[0]].protected


def test_forced_change_is_a_single_edit() -> None:
    segs = [Segment("hello", role="query")]
    config = TextPerturbConfig(kinds=("zero_width",), rate=1e-9)
    out, _ = perturb_segments(segs, config, random.Random(0))
    assert len(out[0].text) == 6 and remove_zero_width(out[0].text) == "hello"
    config = TextPerturbConfig(kinds=("confusable",), rate=1e-9)
    out, _ = perturb_segments(segs, config, random.Random(0))
    assert sum(a != b for a, b in zip("hello", out[0].text, strict=True)) == 1
    config = TextPerturbConfig(kinds=("markup",), rate=1e-9)
    out, _ = perturb_segments([Segment("one two three", role="query")], config, random.Random(0))
    assert _unwrap(out[0].text) == "one two three"
    assert any(w.format(x) in out[0].text for w in MARKUP_WRAPPERS for x in "one two three".split())
    config = TextPerturbConfig(kinds=("typo",), rate=1e-9)
    out, _ = perturb_segments(segs, config, random.Random(0))
    assert out[0].text != "hello" and abs(len(out[0].text) - 5) <= 1


def test_perturb_segments_with_nothing_eligible_returns_the_prompt() -> None:
    segs = [Segment("Answer:", protected=True, role="cue"), Segment(" ", role="format")]
    for kind in KINDS:
        out, _ = perturb_segments(segs, TextPerturbConfig(kinds=(kind,)), random.Random(0))
        assert out == segs


@pytest.mark.parametrize("kind", KINDS)
def test_query_scope_touches_only_query_segments(kind: str) -> None:
    config = TextPerturbConfig(kinds=(kind,), rate=1.0, scope="query")
    out, _ = perturb_segments(PROMPT, config, random.Random(11))
    for before, after in zip(PROMPT, out, strict=True):
        if before.role == "query":
            assert after.text != before.text
        else:
            assert after is before


def test_all_scope_touches_every_unprotected_segment() -> None:
    config = TextPerturbConfig(kinds=("confusable",), rate=1.0)
    out, _ = perturb_segments(PROMPT, config, random.Random(2))
    for before, after in zip(PROMPT, out, strict=True):
        assert (after.text != before.text) == (not before.protected)


def test_kind_choice_follows_weights() -> None:
    config = TextPerturbConfig(weights=(0.0, 0.0, 1.0, 0.0))
    assert {perturb_segments(PROMPT, config, random.Random(s))[1] for s in range(30)} == {"markup"}
    uniform = TextPerturbConfig()
    chosen = [perturb_segments(PROMPT, uniform, random.Random(s))[1] for s in range(200)]
    assert set(chosen) == set(KINDS)


# --------------------------------------------------------------------------------------------
# determinism across processes

DIGEST_SCRIPT = """
import hashlib
from lm_eval_robust.tasks.perturb.rng import seeded_rng
from lm_eval_robust.tasks.perturb.segments import Segment, join
from lm_eval_robust.tasks.perturb.text import (
    TEXT_PERTURBATIONS, TextPerturbConfig, confusable_map, perturb_segments,
)

h = hashlib.sha256()
text = "Ünïcode and ASCII: The quick brown fox, 0123456789 jumps! café naïve"
for name in sorted(TEXT_PERTURBATIONS):
    for seed in range(6):
        for rate in (0.1, 0.5, 1.0):
            out = TEXT_PERTURBATIONS[name](text, seeded_rng("text", name, seed), rate)
            h.update(out.encode("utf-8") + b"\\0")
segments = [
    Segment("Decide if the claim holds.\\n", role="definition"),
    Segment("Claim: water is wet.\\n", role="demo"),
    Segment("Answer: yes\\n", protected=True, role="label"),
    Segment("Claim: the moon is made of cheese.\\n", role="query"),
    Segment("Answer:", protected=True, role="cue"),
]
for scope in ("all", "query"):
    config = TextPerturbConfig(rate=0.2, scope=scope)
    for seed in range(30):
        out, kind = perturb_segments(segments, config, seeded_rng("prompt", scope, seed))
        h.update(kind.encode("utf-8") + b"\\0" + join(out).encode("utf-8") + b"\\0")
h.update(repr(sorted(confusable_map().items())).encode("utf-8"))
DIGEST = h.hexdigest()
"""


def _digest_in_subprocess(hash_seed: str) -> str:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = hash_seed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", DIGEST_SCRIPT + "\nprint(DIGEST)"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout.strip().splitlines()[-1]


def test_output_is_identical_across_processes_and_hash_seeds() -> None:
    namespace: dict[str, object] = {}
    exec(DIGEST_SCRIPT, namespace)
    here = namespace["DIGEST"]
    first = _digest_in_subprocess("0")
    second = _digest_in_subprocess("123")
    assert len(first) == 64
    assert first == second == here
