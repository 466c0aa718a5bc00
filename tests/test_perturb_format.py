"""Tests for the FormatSpread prompt-format grammar (lm_eval_robust.tasks.perturb.format)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lm_eval_robust.tasks.perturb.format import (
    CASINGS,
    ITEM_WRAPPERS,
    NUMBER_FORMATS,
    ROMAN_NUMERALS,
    SEPARATORS,
    SPACES,
    TEXT_OPTION_SEPARATORS,
    Answer,
    Enumeration,
    EnumFormat,
    Field,
    Format,
    Header,
    Node,
    Spacing,
    apply_casing,
    count_valid,
    is_valid,
    item_label,
    iter_formats,
    labels_for,
    render,
    sample_formats,
    split_formats,
)
from lm_eval_robust.tasks.perturb.segments import join

REPO = Path(__file__).resolve().parents[1]
FORMATS_DIR = Path(__file__).resolve().parents[2] / "shared/data/formats"

ONE_FIELD = Spacing((Field("Input", "input"), Answer()))
MC = Spacing(
    (
        Field("Passage", "p"),
        Field("Question", "q"),
        Spacing((Header("Options"), Enumeration("", "opts"))),
        Answer(),
    )
)


def formats_data(name: str) -> Path:
    """A file under shared/data/formats, failing clearly when the shared data is missing."""
    path = FORMATS_DIR / name
    if not path.exists():
        pytest.fail(f"shared format data missing: {path} (expected /work/shared/data/formats)")
    return path


def grammar_values() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(formats_data("grammar_values.json").read_text())
    return data


def sampled_files() -> list[Path]:
    folder = formats_data("formatspread_sampled")
    files = sorted(folder.glob("holistic_random_sample_task*_nodes_*_textdisabled.json"))
    tasks = {p.name.split("_")[3] for p in files}
    assert {"task155", "task158", "task280"} <= tasks, tasks
    return files


def upstream_casing() -> dict[str, str]:
    g = grammar_values()
    return dict(zip(g["text_descriptor_fn_upstream_names"], g["text_descriptor_fn"], strict=True))


def one_field(space: str, casing: str, separator: str) -> Format:
    return Format(separator=separator, casing=casing, spaces=(space,), enums=())


# --- value sets ------------------------------------------------------------------------------


def test_value_sets_match_grammar_values_json() -> None:
    g = grammar_values()
    assert list(SEPARATORS) == g["chosen_separator"] and len(SEPARATORS) == 15
    assert list(SPACES) == g["chosen_space"] and len(SPACES) == 16
    assert SPACES.count(" -- ") == 2 and len(set(SPACES)) == 15
    assert list(TEXT_OPTION_SEPARATORS) == g["chosen_separator_text_and_option"]
    assert list(CASINGS) == g["text_descriptor_fn"]
    assert list(ITEM_WRAPPERS) == g["chosen_item_wrapper"]
    upstream_numbers = [s.split(" ")[0].removesuffix("_1based") for s in g["chosen_number_format"]]
    assert list(NUMBER_FORMATS) == upstream_numbers
    assert list(ROMAN_NUMERALS) == g["roman_numerals_lower"]


def test_apply_casing() -> None:
    assert [apply_casing(c, "final answer") for c in CASINGS] == [
        "final answer",
        "Final Answer",
        "FINAL ANSWER",
        "final answer",
    ]
    with pytest.raises(ValueError, match="casing"):
        apply_casing("snake", "x")


# --- counts against the FormatSpread oracle --------------------------------------------------


def test_single_field_counts() -> None:
    assert count_valid(ONE_FIELD) == 680
    assert count_valid(ONE_FIELD, distinct=True) == 640
    everything = list(iter_formats(ONE_FIELD))
    assert len(everything) == 680 and len(set(everything)) == 640
    assert all(is_valid(ONE_FIELD, f) for f in everything)


def test_iter_formats_matches_upstream_full_listing() -> None:
    names = upstream_casing()
    ours = [[f.spaces[0], f.casing, f.separator] for f in iter_formats(ONE_FIELD)]
    for path in sampled_files():
        if "_nodes_960_" not in path.name:
            continue
        rows = json.loads(path.read_text())["valid_value_assignments"]
        assert [[sp, names[c], se] for sp, c, se in rows] == ours, path.name


def test_every_upstream_sampled_assignment_is_valid() -> None:
    names = upstream_casing()
    total = 0
    for path in sampled_files():
        rows = json.loads(path.read_text())["valid_value_assignments"]
        for space, casing, separator in rows:
            assert is_valid(ONE_FIELD, one_field(space, names[casing], separator)), (path, space)
            total += 1
    assert total > 2000


def test_count_matches_brute_force_nested() -> None:
    structure = Spacing(
        (
            Field("Q", "q"),
            Spacing((Header("Note"), Field("N", "n")), whitespace_only=True),
            Answer(),
        )
    )
    brute = sum(
        is_valid(structure, Format(se, c, (s1, s2), ()))
        for s1, s2, c, se in itertools.product(SPACES, SPACES, CASINGS, SEPARATORS)
    )
    assert count_valid(structure) == brute == len(list(iter_formats(structure)))
    assert count_valid(structure, distinct=True) == len(set(iter_formats(structure)))


def test_count_matches_brute_force_enumeration() -> None:
    structure = Spacing((Field("Q", "q"), Enumeration("Option", "o"), Answer()))
    # Wrapper and number format enter no rule here, so fix them and multiply.
    brute = sum(
        is_valid(structure, Format(se, c, (s1,), (EnumFormat(s2, t, "({x})", "arabic"),)))
        for s1, s2, t, c, se in itertools.product(
            SPACES, SPACES, TEXT_OPTION_SEPARATORS, CASINGS, SEPARATORS
        )
    )
    assert count_valid(structure) == brute * len(ITEM_WRAPPERS) * len(NUMBER_FORMATS)


# --- validity rules --------------------------------------------------------------------------


def test_rule1_separator_not_empty() -> None:
    assert is_valid(ONE_FIELD, one_field("\n", "identity", ": "))
    assert not is_valid(ONE_FIELD, one_field("\n", "identity", ""))


def test_rule2_empty_space_only_after_textless_children() -> None:
    assert not is_valid(ONE_FIELD, one_field("", "identity", ": "))
    enum = EnumFormat(" ", "", "({x})", "upper_letter")
    # Header "Options" has no text, so '' may join it to the enumeration ...
    assert is_valid(MC, Format(": ", "identity", ("\n", ""), (enum,)))
    # ... but never two text fields.
    assert not is_valid(MC, Format(": ", "identity", ("", " "), (enum,)))


def test_rule3_newline_separator_needs_newline_spaces() -> None:
    assert not is_valid(ONE_FIELD, one_field(" ", "identity", "\n\t"))
    assert is_valid(ONE_FIELD, one_field(" \n", "identity", "\n\t"))
    enum = EnumFormat("\n", "", "({x})", "arabic")
    # Separator is shared: the nested header/enumeration spacing also needs a newline.
    assert not is_valid(MC, Format("\n ", "identity", ("\n", " "), (enum,)))
    assert is_valid(MC, Format("\n ", "identity", ("\n", "\n"), (enum,)))
    # Headers are exempt: a spacing holding only headers may lack a newline.
    headers = Spacing((Spacing((Header("Note"), Header("Task"))), Field("Q", "q"), Answer()))
    assert is_valid(headers, Format("\n ", "identity", ("\n", " "), ()))


def test_rule4_enumeration_newline_separator_needs_newline_space() -> None:
    structure = Spacing((Enumeration("Fact", "f"), Answer()))
    ok = EnumFormat("\n", " ", "{x}.", "arabic")
    bad = EnumFormat(" ", " ", "{x}.", "arabic")
    assert is_valid(structure, Format("\n ", "title", ("\n",), (ok,)))
    assert not is_valid(structure, Format("\n ", "title", ("\n",), (bad,)))
    assert is_valid(structure, Format(": ", "title", ("\n",), (bad,)))


def test_rule5_whitespace_only_header_spacing() -> None:
    strict = Spacing(
        (
            Field("Question", "q"),
            Spacing((Header("Options"), Enumeration("", "o")), whitespace_only=True),
            Answer(),
        )
    )
    enum = (EnumFormat(" ", "", "({x})", "upper_letter"),)
    assert is_valid(MC, Format(": ", "identity", ("\n", ", "), enum))
    assert not is_valid(strict, Format(": ", "identity", ("\n", ", "), enum))
    assert not is_valid(strict, Format(": ", "identity", ("\n", ""), enum))  # '' is not whitespace
    assert is_valid(strict, Format(": ", "identity", ("\n", " \n"), enum))


def test_shape_and_value_checks() -> None:
    assert not is_valid(ONE_FIELD, Format(": ", "identity", ("\n", "\n"), ()))
    assert not is_valid(ONE_FIELD, one_field("\n", "Identity", ": "))
    assert not is_valid(ONE_FIELD, one_field("\r", "identity", ": "))
    # A descriptor-less enumeration has no sep_text_and_option to vary (upstream).
    bare = EnumFormat(" ", " ", "({x})", "arabic")
    assert not is_valid(MC, Format(": ", "identity", ("\n", " "), (bare,)))
    long_enum = Spacing((Enumeration("Fact", "f", max_items=13), Answer()))
    roman = EnumFormat("\n", "", "({x})", "unicode_roman")
    assert not is_valid(long_enum, Format(": ", "identity", ("\n",), (roman,)))
    with pytest.raises(ValueError, match="last child"):
        is_valid(Spacing((Answer(), Field("A", "a"))), one_field("\n", "identity", ": "))


# --- sampling and splitting ------------------------------------------------------------------


def test_sample_formats_deterministic_distinct_valid() -> None:
    a = sample_formats(MC, 200, seed=3)
    b = sample_formats(MC, 200, seed=3)
    assert a == b and len(a) == 200 and len(set(a)) == 200
    assert all(is_valid(MC, f) for f in a)
    assert sample_formats(MC, 200, seed=4) != a
    c = sample_formats(MC, 200, seed=3, exclude=a[:50])
    assert len(c) == 200 and not set(c) & set(a[:50])


def test_sample_formats_fast_for_two_enumerations() -> None:
    structure = Spacing(
        (
            Enumeration("Fact", "f"),
            Spacing((Field("Question", "q"), Enumeration("", "o"))),
            Answer(),
        )
    )
    formats = sample_formats(structure, 1000, seed="task1297")
    assert len(set(formats)) == 1000 and all(is_valid(structure, f) for f in formats)


def test_sample_formats_returns_all_when_few() -> None:
    everything = list(dict.fromkeys(iter_formats(ONE_FIELD)))
    assert sample_formats(ONE_FIELD, 640, seed=0) == everything
    assert sample_formats(ONE_FIELD, 5000, seed=9) == everything
    rest = sample_formats(ONE_FIELD, 1000, seed=0, exclude=everything[:40])
    assert rest == everything[40:]
    assert len(sample_formats(ONE_FIELD, 600, seed=0, exclude=everything[:40])) == 600


def test_sample_formats_same_across_processes() -> None:
    here = [f.format_id for f in sample_formats(MC, 30, seed=11)]
    code = (
        "import json\n"
        "from lm_eval_robust.tasks.perturb.format import *\n"
        "mc = Spacing((Field('Passage', 'p'), Field('Question', 'q'),"
        " Spacing((Header('Options'), Enumeration('', 'opts'))), Answer()))\n"
        "print(json.dumps([f.format_id for f in sample_formats(mc, 30, seed=11)]))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == here


def test_format_dict_roundtrip_and_id() -> None:
    fmt = Format(": ", "upper", ("\n", " "), (EnumFormat(" ", "", "({x})", "upper_letter"),))
    data = json.loads(json.dumps(fmt.to_dict()))
    assert Format.from_dict(data) == fmt
    assert len(fmt.format_id) == 12 and int(fmt.format_id, 16) >= 0
    assert Format.from_dict(data).format_id == fmt.format_id
    assert fmt.format_id == "a71c3f7bce77"  # pinned: ids are stored alongside results
    assert one_field("\n", "upper", ": ").format_id != fmt.format_id


def test_split_formats() -> None:
    formats = sample_formats(MC, 101, seed=5)
    parts = split_formats(formats, seed=1)
    sizes = {k: len(v) for k, v in parts.items()}
    assert sizes == {"train": 51, "test": 35, "holdout": 15}
    flat = parts["train"] + parts["test"] + parts["holdout"]
    assert sorted(flat, key=lambda f: f.format_id) == sorted(formats, key=lambda f: f.format_id)
    assert len(set(flat)) == len(formats)
    assert split_formats(formats, seed=1) == parts and split_formats(formats, seed=2) != parts
    for n in range(12):
        assert sum(len(v) for v in split_formats(formats[:n]).values()) == n
    with pytest.raises(ValueError):
        split_formats(formats, fractions=(0.5, 0.5, 0.5))


# --- labels and rendering --------------------------------------------------------------------


def test_item_label_every_number_format() -> None:
    expected = {
        "arabic": ["1", "2", "3", "4"],
        "upper_letter": ["A", "B", "C", "D"],
        "lower_letter": ["a", "b", "c", "d"],
        "unicode_roman": ["\u2160", "\u2161", "\u2162", "\u2163"],
        "roman_lower": ["i", "ii", "iii", "iv"],
        "roman_upper": ["I", "II", "III", "IV"],
    }
    assert set(expected) == set(NUMBER_FORMATS)
    for number_format, labels in expected.items():
        assert [item_label(number_format, i) for i in range(4)] == labels
        assert labels_for(EnumFormat(" ", "", "({x})", number_format), 4) == labels
    assert item_label("arabic", 99) == "100"
    assert item_label("unicode_roman", 11) == "\u216b"
    assert item_label("roman_upper", 14) == "XV"
    assert item_label("lower_letter", 25) == "z"
    for number_format, first_bad in [
        ("unicode_roman", 12),
        ("roman_lower", 15),
        ("roman_upper", 15),
        ("upper_letter", 26),
        ("lower_letter", 26),
    ]:
        with pytest.raises(ValueError, match=number_format):
            item_label(number_format, first_bad)
    with pytest.raises(ValueError):
        item_label("arabic", -1)
    with pytest.raises(ValueError, match="unknown"):
        item_label("greek", 0)


MC_VALUES: dict[str, str | list[str]] = {
    "p": "The sky is blue.",
    "q": "What color is the sky?",
    "opts": ["red", "blue"],
}


def test_render_exact_string_and_protection() -> None:
    fmt = Format(": ", "upper", ("\n", " "), (EnumFormat(" ", "", "({x})", "upper_letter"),))
    query = render(MC, fmt, MC_VALUES)
    assert join(query) == (
        "PASSAGE: The sky is blue.\nQUESTION: What color is the sky?\n"
        "OPTIONS:  (A): red (B): blue\nANSWER:"
    )
    assert query[-1].role == "cue" and query[-1].protected and join(query).endswith("ANSWER:")
    markers = [s for s in query if s.role == "marker"]
    assert [s.text for s in markers] == ["(A)", "(B)"] and all(s.protected for s in markers)
    assert all(not s.protected for s in query if s.role in ("text", "format"))
    assert [s.text for s in query if s.role == "text"] == [
        "The sky is blue.",
        "What color is the sky?",
        "red",
        "blue",
    ]
    demo = render(MC, fmt, MC_VALUES, answer="B")
    assert join(demo) == join(query) + " B"
    assert [(s.text, s.role, s.protected) for s in demo[-3:]] == [
        ("ANSWER:", "cue", True),
        (" ", "format", True),
        ("B", "label", True),
    ]


def test_render_described_enumeration_and_whitespace_cue() -> None:
    structure = Spacing((Enumeration("Option", "o"), Answer()))
    fmt = Format(" \n\t", "lower", ("\n",), (EnumFormat("\n", " ", "{x}.", "roman_upper"),))
    assert join(render(structure, fmt, {"o": ["x", "y"]}, answer="II")) == (
        "option I. \n\tx\noption II. \n\ty\nanswer II"
    )
    dash = one_field("\n", "lower", " - ")
    assert join(render(ONE_FIELD, dash, {"input": "hi"})) == "input - hi\nanswer -"


def test_render_rejects_bad_values() -> None:
    fmt = Format(": ", "upper", ("\n", " "), (EnumFormat(" ", "", "({x})", "upper_letter"),))
    with pytest.raises(ValueError, match="opts"):
        render(MC, fmt, {**MC_VALUES, "opts": "red"})
    with pytest.raises(ValueError, match="match"):
        render(MC, one_field("\n", "upper", ": "), MC_VALUES)


# --- property test ---------------------------------------------------------------------------


@st.composite
def structures(draw: st.DrawFn) -> tuple[Spacing, dict[str, str | list[str]]]:
    values: dict[str, str | list[str]] = {}
    children: list[Node] = []
    for k in range(draw(st.integers(0, 2))):
        values[f"f{k}"] = f"fieldtext{k}"
        children.append(Field(draw(st.sampled_from(["Input", "question", "Sentence 1"])), f"f{k}"))
    for k in range(draw(st.integers(0 if children else 1, 2))):
        key = f"e{k}"
        values[key] = [f"opt{k}x{j}" for j in range(draw(st.integers(1, 5)))]
        enum = Enumeration(draw(st.sampled_from(["", "Option", "fact"])), key)
        if draw(st.booleans()):
            nested = (Header("Options"), enum)
            children.append(Spacing(nested, whitespace_only=draw(st.booleans())))
        else:
            children.append(enum)
    order = draw(st.permutations(children))
    return Spacing((*order, Answer(draw(st.sampled_from(["Answer", "Label"]))))), values


@settings(max_examples=40, deadline=None)
@given(structures(), st.integers(0, 2**32), st.integers(1, 8))
def test_sampled_formats_valid_and_render_all_texts(
    case: tuple[Spacing, dict[str, str | list[str]]], seed: int, n: int
) -> None:
    structure, values = case
    formats = sample_formats(structure, n, seed=seed)
    assert len(formats) == min(n, count_valid(structure, distinct=True))
    assert len(set(formats)) == len(formats)
    texts = [t for v in values.values() for t in ([v] if isinstance(v, str) else v)]
    for fmt in formats:
        assert is_valid(structure, fmt)
        query = render(structure, fmt, values)
        rendered = join(query)
        assert all(t in rendered for t in texts)
        assert query[-1].role == "cue" and rendered.endswith(query[-1].text)
