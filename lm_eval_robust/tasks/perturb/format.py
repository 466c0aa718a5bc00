"""FormatSpread prompt-format grammar (Sclar et al. 2023; as used by Seleznyov et al. 2025).

A task's prompt *structure* is a tree of nodes (:class:`Field`, :class:`Enumeration`,
:class:`Header`, :class:`Answer`, nested :class:`Spacing`); a :class:`Format` picks one value for
every formatting attribute of that tree (one space per spacing node, four values per enumeration,
and the global separator and casing shared by every field). :func:`is_valid` applies FormatSpread's
five validity rules, :func:`iter_formats` / :func:`count_valid` enumerate the valid product in the
upstream order, :func:`sample_formats` draws distinct valid formats as FormatSpread does (uniform
per attribute, reject and redraw) but with a process-independent seeded RNG.

The value sets are written here (not read at run time); the tests compare them with
``shared/data/formats/grammar_values.json``.

Answer-field design decision: the answer cue is ``casing(descriptor) + separator.rstrip()``
(e.g. ``"Answer:"`` for ``": "``, ``"ANSWER"`` for ``" \\n\\t"``), and a given answer follows it
after one space. The label must be the first token after the cue in every format: a newline or
tab before it (as upstream's ``"Answer\\n\\t<label>"``) would make the first token of every
label the same whitespace token. Without an answer the query ends right after the cue (the
harness adds the ``" " + label`` continuation).

Other differences from upstream: enumerations use the shared separator (upstream some own one);
a descriptor-less enumeration's ``sep_text_and_option`` is fixed to ``''`` (upstream does not vary
it); rule 5 is the explicit ``Spacing.whitespace_only`` flag (upstream
``allow_only_non_char_spaces``); ``Enumeration.max_items`` optionally rules out number formats
that cannot label that many items (upstream crashes when rendering them).

One concept in one module of about 700 lines: the node types, the validity rules, the enumeration,
the sampling and the rendering all read one compiled structure, and each follows upstream's
grammar rule by rule, so they change together.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from lm_eval_robust.tasks.perturb.rng import seeded_rng
from lm_eval_robust.tasks.perturb.segments import Segment

__all__ = [
    "CASINGS",
    "ITEM_WRAPPERS",
    "NUMBER_FORMATS",
    "ROMAN_NUMERALS",
    "SEPARATORS",
    "SPACES",
    "TEXT_OPTION_SEPARATORS",
    "Answer",
    "EnumFormat",
    "Enumeration",
    "Field",
    "Format",
    "Header",
    "Node",
    "Spacing",
    "apply_casing",
    "count_valid",
    "is_valid",
    "item_label",
    "iter_formats",
    "labels_for",
    "render",
    "sample_formats",
    "split_formats",
]

# --- value sets (FormatSpread grammar_definition.py) ------------------------------------------

SEPARATORS: tuple[str, ...] = (
    "",
    "::: ",
    ":: ",
    ": ",
    " \n\t",
    "\n    ",
    " : ",
    " - ",
    " ",
    "\n ",
    "\n\t",
    ":",
    "::",
    "- ",
    "\t",
)
"""Separator between a field descriptor and its text (shared by the whole prompt)."""

SPACES: tuple[str, ...] = (
    "",
    " ",
    "\n",
    " \n",
    " -- ",
    "  ",
    "; \n",
    " || ",
    " <sep> ",
    " -- ",
    ", ",
    " \n ",
    " , ",
    "\n ",
    ". ",
    " ,  ",
)
"""Spaces between prompt components, as upstream lists them (``' -- '`` twice)."""

CASINGS: tuple[str, ...] = ("identity", "title", "upper", "lower")
TEXT_OPTION_SEPARATORS: tuple[str, ...] = ("", " ", "  ", "\t")
ITEM_WRAPPERS: tuple[str, ...] = ("({x})", "{x}.", "{x})", "{x} )", "[{x}]", "<{x}>")
NUMBER_FORMATS: tuple[str, ...] = (
    "arabic",
    "upper_letter",
    "lower_letter",
    "unicode_roman",
    "roman_lower",
    "roman_upper",
)
ROMAN_NUMERALS: tuple[str, ...] = (
    "i",
    "ii",
    "iii",
    "iv",
    "v",
    "vi",
    "vii",
    "viii",
    "ix",
    "x",
    "xi",
    "xii",
    "xiii",
    "xiv",
    "xv",
)

_CAPACITY: dict[str, int | None] = {
    "arabic": None,
    "upper_letter": 26,
    "lower_letter": 26,
    "unicode_roman": 12,
    "roman_lower": len(ROMAN_NUMERALS),
    "roman_upper": len(ROMAN_NUMERALS),
}


# --- structure nodes -------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """A text field: ``casing(descriptor) + separator + values[key]``."""

    descriptor: str
    key: str


@dataclass(frozen=True)
class Answer:
    """The answer field; always the last child of the root spacing."""

    descriptor: str = "Answer"


@dataclass(frozen=True)
class Enumeration:
    """A list (options, facts): item i is descriptor + sep_text_and_option + marker + sep + text.

    ``max_items`` (optional, not upstream) makes number formats that cannot label that many items
    invalid (e.g. ``unicode_roman`` past 12).
    """

    descriptor: str
    key: str
    max_items: int | None = None


@dataclass(frozen=True)
class Header:
    """A text-less field such as ``"Options"``: renders ``casing(descriptor) + separator``."""

    descriptor: str


@dataclass(frozen=True)
class Spacing:
    """Joins its children with its chosen space.

    ``whitespace_only`` marks upstream's ``allow_only_non_char_spaces`` (rule 5: a header-to-
    enumeration spacing whose space must be non-empty whitespace).
    """

    children: tuple[Node, ...]
    whitespace_only: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "children", tuple(self.children))


Node: TypeAlias = Field | Answer | Enumeration | Header | Spacing


# --- formats ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnumFormat:
    """The formatting attributes of one enumeration."""

    space: str
    sep_text_and_option: str
    item_wrapper: str
    number_format: str


@dataclass(frozen=True)
class Format:
    """One value per formatting attribute of a structure."""

    separator: str
    casing: str
    spaces: tuple[str, ...]  # one per Spacing node, depth-first order
    enums: tuple[EnumFormat, ...]  # one per Enumeration node, depth-first order

    def __post_init__(self) -> None:
        object.__setattr__(self, "spaces", tuple(self.spaces))
        object.__setattr__(self, "enums", tuple(self.enums))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict."""
        return {
            "separator": self.separator,
            "casing": self.casing,
            "spaces": list(self.spaces),
            "enums": [
                {
                    "space": e.space,
                    "sep_text_and_option": e.sep_text_and_option,
                    "item_wrapper": e.item_wrapper,
                    "number_format": e.number_format,
                }
                for e in self.enums
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Format:
        """Inverse of :meth:`to_dict`."""
        enums = tuple(
            EnumFormat(
                space=str(e["space"]),
                sep_text_and_option=str(e["sep_text_and_option"]),
                item_wrapper=str(e["item_wrapper"]),
                number_format=str(e["number_format"]),
            )
            for e in data.get("enums", ())
        )
        return cls(
            separator=str(data["separator"]),
            casing=str(data["casing"]),
            spaces=tuple(str(s) for s in data["spaces"]),
            enums=enums,
        )

    @property
    def format_id(self) -> str:
        """First 12 hex digits of the SHA-256 of the canonical JSON."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode("ascii")).hexdigest()[:12]


# --- values ----------------------------------------------------------------------------------


def apply_casing(casing: str, text: str) -> str:
    """Apply a casing (identity, title, upper, lower) to a descriptor."""
    if casing == "identity":
        return text
    if casing == "title":
        return text.title()
    if casing == "upper":
        return text.upper()
    if casing == "lower":
        return text.lower()
    raise ValueError(f"unknown casing {casing!r}; expected one of {CASINGS}")


def item_label(number_format: str, i: int) -> str:
    """The label of item ``i`` (0-based) in a number format."""
    if number_format not in _CAPACITY:
        raise ValueError(
            f"unknown number format {number_format!r}; expected one of {NUMBER_FORMATS}"
        )
    capacity = _CAPACITY[number_format]
    if i < 0 or (capacity is not None and i >= capacity):
        raise ValueError(
            f"number format {number_format!r} labels items 0..{capacity}-1 only (got index {i})"
            if capacity is not None
            else f"item index must be >= 0 (got {i})"
        )
    if number_format == "arabic":
        return str(i + 1)
    if number_format == "upper_letter":
        return chr(ord("A") + i)
    if number_format == "lower_letter":
        return chr(ord("a") + i)
    if number_format == "unicode_roman":
        return chr(0x2160 + i)
    if number_format == "roman_lower":
        return ROMAN_NUMERALS[i]
    return ROMAN_NUMERALS[i].upper()


def labels_for(structure_enum_fmt: EnumFormat, n: int) -> list[str]:
    """The first ``n`` item labels (unwrapped, e.g. ``"A"``) of an enumeration format."""
    return [item_label(structure_enum_fmt.number_format, i) for i in range(n)]


def _wrap(wrapper: str, label: str) -> str:
    return wrapper.replace("{x}", label)


# --- compiled structure ----------------------------------------------------------------------


def _has_text(node: Node) -> bool:
    if isinstance(node, Field | Enumeration):
        return True
    if isinstance(node, Spacing):
        return any(_has_text(c) for c in node.children)
    return False


def _has_separator_node(node: Node) -> bool:
    # Headers are exempt from rule 3 (upstream: prompt_without_text).
    if isinstance(node, Field | Answer | Enumeration):
        return True
    if isinstance(node, Spacing):
        return any(_has_separator_node(c) for c in node.children)
    return False


@dataclass(frozen=True)
class _SpacingInfo:
    needs_nonempty: bool  # rule 2
    has_sep_node: bool  # rule 3
    whitespace_only: bool  # rule 5


@dataclass(frozen=True)
class _EnumInfo:
    has_descriptor: bool
    max_items: int | None


@dataclass(frozen=True)
class _Compiled:
    spacings: tuple[_SpacingInfo, ...]
    enums: tuple[_EnumInfo, ...]
    order: tuple[tuple[str, int], ...]  # ("space", i) / ("enum", j) in depth-first order


@functools.lru_cache(maxsize=256)
def _compile(structure: Spacing) -> _Compiled:
    if not isinstance(structure, Spacing):
        raise ValueError("a task structure must be a root Spacing node")
    if not structure.children or not isinstance(structure.children[-1], Answer):
        raise ValueError("the root Spacing's last child must be the Answer field")
    spacings: list[_SpacingInfo] = []
    enums: list[_EnumInfo] = []
    order: list[tuple[str, int]] = []
    keys: set[str] = set()
    answers = 0

    def visit(node: Node) -> None:
        nonlocal answers
        if isinstance(node, Spacing):
            if not node.children:
                raise ValueError("a Spacing node needs at least one child")
            order.append(("space", len(spacings)))
            spacings.append(
                _SpacingInfo(
                    needs_nonempty=any(_has_text(c) for c in node.children[:-1]),
                    has_sep_node=_has_separator_node(node),
                    whitespace_only=node.whitespace_only,
                )
            )
            for child in node.children:
                visit(child)
        elif isinstance(node, Enumeration):
            if node.key in keys:
                raise ValueError(f"duplicate value key {node.key!r}")
            keys.add(node.key)
            order.append(("enum", len(enums)))
            enums.append(_EnumInfo(bool(node.descriptor), node.max_items))
        elif isinstance(node, Field):
            if node.key in keys:
                raise ValueError(f"duplicate value key {node.key!r}")
            keys.add(node.key)
        elif isinstance(node, Answer):
            answers += 1
        elif not isinstance(node, Header):
            raise TypeError(f"not a structure node: {node!r}")

    visit(structure)
    if answers != 1:
        raise ValueError(f"a structure needs exactly one Answer field (found {answers})")
    return _Compiled(tuple(spacings), tuple(enums), tuple(order))


# --- validity --------------------------------------------------------------------------------


def _separator_ok(separator: str) -> bool:
    # Rule 1: the separator of a field must not be '' (every structure has the Answer field).
    return separator in SEPARATORS and separator != ""


def _space_ok(info: _SpacingInfo, space: str, separator: str) -> bool:
    if space not in SPACES:
        return False
    if info.needs_nonempty and space == "":  # rule 2
        return False
    if info.has_sep_node and "\n" in separator and "\n" not in space:  # rule 3
        return False
    if info.whitespace_only and not space.isspace():  # rule 5 ('' is not whitespace)
        return False
    return True


def _enum_ok(info: _EnumInfo, ef: EnumFormat, separator: str) -> bool:
    if (
        ef.space not in SPACES
        or ef.sep_text_and_option not in TEXT_OPTION_SEPARATORS
        or ef.item_wrapper not in ITEM_WRAPPERS
        or ef.number_format not in NUMBER_FORMATS
    ):
        return False
    # Upstream does not vary sep_text_and_option of a descriptor-less enumeration (fixed '').
    if not info.has_descriptor and ef.sep_text_and_option != "":
        return False
    capacity = _CAPACITY[ef.number_format]
    if info.max_items is not None and capacity is not None and info.max_items > capacity:
        return False
    # Rule 4.
    if ("\n" in separator or "\n" in ef.sep_text_and_option) and "\n" not in ef.space:
        return False
    return True


def is_valid(structure: Spacing, fmt: Format) -> bool:
    """Whether ``fmt`` fits ``structure`` and passes FormatSpread's five validity rules."""
    comp = _compile(structure)
    if len(fmt.spaces) != len(comp.spacings) or len(fmt.enums) != len(comp.enums):
        return False
    if fmt.casing not in CASINGS or not _separator_ok(fmt.separator):
        return False
    if not all(
        _space_ok(i, s, fmt.separator) for i, s in zip(comp.spacings, fmt.spaces, strict=True)
    ):
        return False
    return all(_enum_ok(i, e, fmt.separator) for i, e in zip(comp.enums, fmt.enums, strict=True))


# --- enumeration and counting ----------------------------------------------------------------

_Choice: TypeAlias = tuple[str | EnumFormat, int]  # value and bitmask of separators it allows


def _sep_mask(ok: Iterable[bool]) -> int:
    return sum(1 << k for k, good in enumerate(ok) if good)


@functools.lru_cache(maxsize=256)
def _slot_choices(structure: Spacing, distinct: bool) -> tuple[tuple[_Choice, ...], ...]:
    """Per attribute slot (DFS order), every value that is valid for some separator."""
    comp = _compile(structure)
    spaces = tuple(dict.fromkeys(SPACES)) if distinct else SPACES
    slots: list[tuple[_Choice, ...]] = []
    for kind, idx in comp.order:
        choices: list[_Choice] = []
        if kind == "space":
            sinfo = comp.spacings[idx]
            for space in spaces:
                mask = _sep_mask(
                    _separator_ok(s) and _space_ok(sinfo, space, s) for s in SEPARATORS
                )
                if mask:
                    choices.append((space, mask))
        else:
            einfo = comp.enums[idx]
            septexts = TEXT_OPTION_SEPARATORS if einfo.has_descriptor else ("",)
            for wrapper, number, space, septext in itertools.product(
                ITEM_WRAPPERS, NUMBER_FORMATS, spaces, septexts
            ):
                ef = EnumFormat(space, septext, wrapper, number)
                mask = _sep_mask(_separator_ok(s) and _enum_ok(einfo, ef, s) for s in SEPARATORS)
                if mask:
                    choices.append((ef, mask))
        slots.append(tuple(choices))
    return tuple(slots)


def iter_formats(structure: Spacing) -> Iterator[Format]:
    """Every valid format, in upstream product order (DFS attributes, then casing, separator).

    Upstream's duplicate space ``' -- '`` is kept, so equal formats can repeat.
    """
    slots = _slot_choices(structure, False)
    full = (1 << len(SEPARATORS)) - 1

    def rec(k: int, mask: int, chosen: list[str | EnumFormat]) -> Iterator[Format]:
        if not mask:
            return
        if k == len(slots):
            spaces = tuple(v for v in chosen if isinstance(v, str))
            enums = tuple(v for v in chosen if isinstance(v, EnumFormat))
            for casing in CASINGS:
                for s, sep in enumerate(SEPARATORS):
                    if mask >> s & 1:
                        yield Format(sep, casing, spaces, enums)
            return
        for value, m in slots[k]:
            chosen.append(value)
            yield from rec(k + 1, mask & m, chosen)
            chosen.pop()

    yield from rec(0, full, [])


def count_valid(structure: Spacing, distinct: bool = False) -> int:
    """Number of valid formats; with upstream duplicates unless ``distinct``."""
    slots = _slot_choices(structure, distinct)
    total = 0
    for s in range(len(SEPARATORS)):
        prod = len(CASINGS)
        for choices in slots:
            prod *= sum(1 for _, m in choices if m >> s & 1)
            if not prod:
                break
        total += prod
    return total


def sample_formats(
    structure: Spacing, n: int, seed: int | str, exclude: Iterable[Format] = ()
) -> list[Format]:
    """``n`` distinct valid formats not in ``exclude``, drawn as FormatSpread does, seeded.

    Each attribute is drawn uniformly (DFS order, then casing and separator); invalid, repeated
    and excluded draws are rejected. If no more than ``n`` such formats exist, all of them are
    returned in :func:`iter_formats` order.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0 (got {n})")
    comp = _compile(structure)
    excluded = set(exclude)
    available = count_valid(structure, distinct=True) - sum(
        1 for f in excluded if is_valid(structure, f)
    )
    if available <= n:
        seen: set[Format] = set()
        out: list[Format] = []
        for f in iter_formats(structure):
            if f not in seen and f not in excluded:
                seen.add(f)
                out.append(f)
        return out

    rng = seeded_rng("lm_eval_robust.format.sample_formats", seed)
    chosen: list[Format] = []
    seen = set(excluded)
    max_draws = 1000 * (n + 10) + 100 * available
    for _ in range(max_draws):
        if len(chosen) == n:
            break
        spaces: list[str] = []
        enums: list[EnumFormat] = []
        for kind, idx in comp.order:
            if kind == "space":
                spaces.append(rng.choice(SPACES))
            else:
                wrapper = rng.choice(ITEM_WRAPPERS)
                number = rng.choice(NUMBER_FORMATS)
                space = rng.choice(SPACES)
                septext = (
                    rng.choice(TEXT_OPTION_SEPARATORS) if comp.enums[idx].has_descriptor else ""
                )
                enums.append(EnumFormat(space, septext, wrapper, number))
        casing = rng.choice(CASINGS)
        separator = rng.choice(SEPARATORS)
        fmt = Format(separator, casing, tuple(spaces), tuple(enums))
        if fmt in seen or not is_valid(structure, fmt):
            continue
        seen.add(fmt)
        chosen.append(fmt)
    if len(chosen) < n:  # pragma: no cover - only with an absurdly small valid fraction
        raise RuntimeError(f"sampled only {len(chosen)} of {n} formats")
    return chosen


def split_formats(
    formats: Sequence[Format],
    fractions: tuple[float, float, float] = (0.5, 0.35, 0.15),
    seed: int | str = 0,
) -> dict[str, list[Format]]:
    """Disjoint seeded train/test/holdout split; sizes by largest-remainder rounding."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions must be 3 non-negative numbers summing to 1 (got {fractions})")
    if len(set(formats)) != len(formats):
        raise ValueError("formats must be distinct")
    total = len(formats)
    raw = [f * total for f in fractions]
    sizes = [int(r) for r in raw]
    by_remainder = sorted(range(3), key=lambda k: (-(raw[k] - sizes[k]), k))
    for k in by_remainder[: total - sum(sizes)]:
        sizes[k] += 1
    items = list(formats)
    seeded_rng("lm_eval_robust.format.split_formats", seed).shuffle(items)
    a, b = sizes[0], sizes[0] + sizes[1]
    return {"train": items[:a], "test": items[a:b], "holdout": items[b:]}


# --- rendering -------------------------------------------------------------------------------


def render(
    structure: Spacing,
    fmt: Format,
    values: Mapping[str, str | Sequence[str]],
    answer: str | None = None,
) -> list[Segment]:
    """Render one instance of ``structure`` in ``fmt`` as segments.

    Option markers, the answer cue and the answer label are protected.
    """
    comp = _compile(structure)
    if len(fmt.spaces) != len(comp.spacings) or len(fmt.enums) != len(comp.enums):
        raise ValueError("format does not match the structure (number of spaces / enumerations)")
    space_iter = iter(fmt.spaces)
    enum_iter = iter(fmt.enums)

    def seg(text: str, role: str, protected: bool = False) -> list[Segment]:
        return [Segment(text, protected=protected, role=role)] if text else []

    def descriptor(text: str) -> str:
        return apply_casing(fmt.casing, text)

    def visit(node: Node) -> list[Segment]:
        if isinstance(node, Spacing):
            space = next(space_iter)
            out: list[Segment] = []
            for i, child in enumerate(node.children):
                if i:
                    out += seg(space, "format")
                out += visit(child)
            return out
        if isinstance(node, Field):
            text = values[node.key]
            if not isinstance(text, str):
                raise TypeError(f"value of field {node.key!r} must be a str")
            return seg(descriptor(node.descriptor) + fmt.separator, "format") + seg(text, "text")
        if isinstance(node, Header):
            return seg(descriptor(node.descriptor) + fmt.separator, "format")
        if isinstance(node, Enumeration):
            ef = next(enum_iter)
            items = values[node.key]
            if isinstance(items, str) or not items:
                raise ValueError(f"value of enumeration {node.key!r} must be a non-empty list")
            prefix = descriptor(node.descriptor) + ef.sep_text_and_option if node.descriptor else ""
            out = []
            for i, text in enumerate(items):
                if i:
                    out += seg(ef.space, "format")
                out += seg(prefix, "format")
                marker = _wrap(ef.item_wrapper, item_label(ef.number_format, i))
                out += seg(marker, "marker", protected=True)
                out += seg(fmt.separator, "format") + seg(text, "text")
            return out
        cue = Segment(descriptor(node.descriptor) + fmt.separator.rstrip(), True, "cue")
        if answer is None:
            return [cue]
        return [cue, Segment(" ", True, "format"), Segment(answer, True, "label")]

    return visit(structure)
