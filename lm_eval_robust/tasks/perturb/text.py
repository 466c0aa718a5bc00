"""Character-level text perturbations: zero-width Unicode, confusables, markup, keyboard typos.

Every perturbation is a function ``(text, rng, rate) -> str`` registered in
:data:`TEXT_PERTURBATIONS` under its name. All randomness comes from the ``random.Random``
passed in, and every table is iterated in a sorted order, so a given seed gives byte-identical
output in any process and under any ``PYTHONHASHSEED``.

:func:`perturb_segments` applies one kind, chosen per variant, to the unprotected segments of a
prompt that are in the configured scope; protected segments (label words, option markers, the
answer cue) are returned unchanged.
"""

from __future__ import annotations

import math
import random
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from types import MappingProxyType

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.tasks.perturb.segments import Segment

__all__ = [
    "MARKUP_WRAPPERS",
    "QWERTY_NEIGHBOURS",
    "SCOPES",
    "TEXT_PERTURBATIONS",
    "ZERO_WIDTH_CHARS",
    "TextPerturbConfig",
    "TextPerturbation",
    "confusable",
    "confusable_map",
    "markup",
    "perturb_segments",
    "register_text_perturbation",
    "remove_zero_width",
    "segment_in_scope",
    "typo",
    "zero_width",
]

TextPerturbation = Callable[[str, random.Random, float], str]


class TextPerturbError(UserError):
    """A text-perturbation setting that cannot be used."""


#: Registry of text perturbations by name.
TEXT_PERTURBATIONS: dict[str, TextPerturbation] = {}

#: Per kind: (eligible positions of a text, make exactly one change at a position). Used by
#: :func:`perturb_segments` to force a change when a variant came out identical to the prompt.
_FORCERS: dict[
    str, tuple[Callable[[str], list[int]], Callable[[str, int, random.Random], str]]
] = {}

#: Scopes of :class:`TextPerturbConfig`.
SCOPES: tuple[str, ...] = ("all", "query")

#: Characters inserted by :func:`zero_width` and stripped by :func:`remove_zero_width`:
#: ZERO WIDTH SPACE, ZERO WIDTH NON-JOINER, ZERO WIDTH JOINER, WORD JOINER, ZERO WIDTH NO-BREAK
#: SPACE.
ZERO_WIDTH_CHARS: tuple[str, ...] = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff")
_ZERO_WIDTH_RE = re.compile("[" + "".join(ZERO_WIDTH_CHARS) + "]")

#: Wrappers used by :func:`markup` (``{}`` is the word).
MARKUP_WRAPPERS: tuple[str, ...] = (
    "**{}**",
    "*{}*",
    "__{}__",
    "_{}_",
    "`{}`",
    "~~{}~~",
    "<b>{}</b>",
    "<i>{}</i>",
    "<u>{}</u>",
    "<em>{}</em>",
    "[{}]",
)
_WORD_RE = re.compile(r"\w+")

_QWERTY_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


def _qwerty_neighbours() -> dict[str, str]:
    """Lower-case US QWERTY letter -> its adjacent letter keys (same row and the rows around)."""
    # Row r, column c: the key is offset by about half a key per row, so the neighbours on the
    # row above are columns c and c+1, and on the row below columns c-1 and c.
    table: dict[str, str] = {}
    for r, row in enumerate(_QWERTY_ROWS):
        for c, key in enumerate(row):
            near: list[str] = []
            for rr, cols in ((r - 1, (c, c + 1)), (r, (c - 1, c + 1)), (r + 1, (c - 1, c))):
                if 0 <= rr < len(_QWERTY_ROWS):
                    near += [_QWERTY_ROWS[rr][cc] for cc in cols if 0 <= cc < len(_QWERTY_ROWS[rr])]
            table[key] = "".join(sorted(near))
    return table


#: US QWERTY neighbours of each lower-case letter (upper case uses the same keys).
QWERTY_NEIGHBOURS: Mapping[str, str] = MappingProxyType(_qwerty_neighbours())


def register_text_perturbation(name: str) -> Callable[[TextPerturbation], TextPerturbation]:
    """Register ``fn(text, rng, rate) -> str`` in :data:`TEXT_PERTURBATIONS` under ``name``."""

    def decorator(fn: TextPerturbation) -> TextPerturbation:
        if name in TEXT_PERTURBATIONS:
            raise TextPerturbError(f"text perturbation {name!r} is already registered")
        TEXT_PERTURBATIONS[name] = fn
        return fn

    return decorator


def _check_rate(rate: float) -> None:
    if not (isinstance(rate, int | float) and not isinstance(rate, bool) and 0.0 <= rate <= 1.0):
        raise TextPerturbError(f"rate must be a number in [0, 1], got {rate!r}")


# --------------------------------------------------------------------------------------------
# zero-width characters


def _zero_width_gaps(text: str) -> list[int]:
    """Indices ``i`` (1..len-1) before which a zero-width character may go.

    A gap before a combining mark is skipped: splitting a mark from its base changes how the
    text renders.
    """
    return [i for i in range(1, len(text)) if not unicodedata.category(text[i]).startswith("M")]


def _zero_width_at(text: str, pos: int, rng: random.Random) -> str:
    return text[:pos] + rng.choice(ZERO_WIDTH_CHARS) + text[pos:]


@register_text_perturbation("zero_width")
def zero_width(text: str, rng: random.Random, rate: float) -> str:
    """Insert one of :data:`ZERO_WIDTH_CHARS` into each gap between characters w.p. ``rate``.

    Gaps before combining marks are left alone. ``remove_zero_width(zero_width(t, ...)) == t``
    for any ``t`` that has none of those characters to begin with.
    """
    _check_rate(rate)
    gaps = set(_zero_width_gaps(text))
    out: list[str] = []
    for i, ch in enumerate(text):
        if i in gaps and rng.random() < rate:
            out.append(rng.choice(ZERO_WIDTH_CHARS))
        out.append(ch)
    return "".join(out)


def remove_zero_width(text: str) -> str:
    """Strip every character of :data:`ZERO_WIDTH_CHARS` (what :func:`zero_width` inserts)."""
    return _ZERO_WIDTH_RE.sub("", text)


# --------------------------------------------------------------------------------------------
# confusables


@cache
def _confusable_table() -> Mapping[str, tuple[str, ...]]:
    # Imported here: the package reads its JSON data at import time, so load it only when used.
    from confusable_homoglyphs.confusables import confusables_data

    table: dict[str, tuple[str, ...]] = {}
    for char in sorted(confusables_data):
        if len(char) != 1 or not char.isalnum():
            continue
        glyphs = sorted(
            {
                entry["c"]
                for entry in confusables_data[char]
                if len(entry["c"]) == 1
                and not entry["c"].isascii()
                and entry["c"] != char
                # No marks, controls/format characters or separators: they would attach to a
                # neighbour, vanish or read as a space rather than look like ``char``.
                and unicodedata.category(entry["c"])[0] not in "MCZ"
            }
        )
        if glyphs:
            table[char] = tuple(glyphs)
    return MappingProxyType(table)


def confusable_map() -> Mapping[str, tuple[str, ...]]:
    """Letter/digit -> its single-code-point, non-ASCII homoglyphs, sorted by code point.

    Built once, lazily, from the Unicode confusables data bundled with ``confusable_homoglyphs``
    (homoglyphs that are combining marks, control/format characters or separators are left out).
    Characters with no such homoglyph (e.g. ``0``, ``1``, ``I``, ``m``) are absent.
    """
    return _confusable_table()


def _confusable_positions(text: str) -> list[int]:
    table = _confusable_table()
    return [i for i, ch in enumerate(text) if ch in table]


def _confusable_at(text: str, pos: int, rng: random.Random) -> str:
    return text[:pos] + rng.choice(_confusable_table()[text[pos]]) + text[pos + 1 :]


@register_text_perturbation("confusable")
def confusable(text: str, rng: random.Random, rate: float) -> str:
    """Replace each letter/digit in :func:`confusable_map` w.p. ``rate`` by one of its homoglyphs.

    The length is unchanged; only replaced positions differ.
    """
    _check_rate(rate)
    table = _confusable_table()
    out: list[str] = []
    for ch in text:
        glyphs = table.get(ch)
        if glyphs is not None and rng.random() < rate:
            out.append(rng.choice(glyphs))
        else:
            out.append(ch)
    return "".join(out)


# --------------------------------------------------------------------------------------------
# markup wrappers


def _markup_words(text: str) -> list[int]:
    return [m.start() for m in _WORD_RE.finditer(text)]


def _markup_at(text: str, pos: int, rng: random.Random) -> str:
    m = _WORD_RE.match(text, pos)
    if m is None:  # pragma: no cover - positions come from _markup_words
        raise TextPerturbError(f"no word at position {pos}")
    return text[:pos] + rng.choice(MARKUP_WRAPPERS).format(m.group()) + text[m.end() :]


def _markup(text: str, rng: random.Random, rate: float, *, at_least_one: bool) -> str:
    _check_rate(rate)
    matches = list(_WORD_RE.finditer(text))
    if not matches:
        return text
    chosen = [rng.random() < rate for _ in matches]
    if at_least_one and not any(chosen):
        chosen[rng.randrange(len(matches))] = True
    out: list[str] = []
    last = 0
    for m, wrap in zip(matches, chosen, strict=True):
        if wrap:
            out.append(text[last : m.start()])
            out.append(rng.choice(MARKUP_WRAPPERS).format(m.group()))
            last = m.end()
    out.append(text[last:])
    return "".join(out)


@register_text_perturbation("markup")
def markup(text: str, rng: random.Random, rate: float) -> str:
    """Wrap each word (a ``\\w+`` run) w.p. ``rate`` in a wrapper from :data:`MARKUP_WRAPPERS`.

    The wrappers are ``**w**``, ``*w*``, ``__w__``, ``_w_``, ```w```, ``~~w~~``, ``<b>w</b>``,
    ``<i>w</i>``, ``<u>w</u>``, ``<em>w</em>`` and ``[w]``. If no word was picked and the text has
    any word, one word chosen uniformly is wrapped. Text outside the wrapped words is unchanged.
    (:func:`perturb_segments` lifts the at-least-one rule to the whole prompt instead.)
    """
    return _markup(text, rng, rate, at_least_one=True)


# --------------------------------------------------------------------------------------------
# keyboard typos

_TYPO_KINDS = ("substitute", "swap", "drop", "repeat")


def _typo_options(text: str, i: int) -> list[str]:
    """Typo kinds that change the letter ``text[i]``, in :data:`_TYPO_KINDS` order."""
    ch = text[i]
    options: list[str] = []
    if ch.lower() in QWERTY_NEIGHBOURS:
        options.append("substitute")
    if i + 1 < len(text) and text[i + 1].isalpha() and text[i + 1] != ch:
        options.append("swap")
    options += ["drop", "repeat"]
    return options


def _neighbour(ch: str, rng: random.Random) -> str:
    key = rng.choice(QWERTY_NEIGHBOURS[ch.lower()])
    return key.upper() if ch.isupper() else key


def _apply_typo(text: str, i: int, kind: str, rng: random.Random) -> tuple[str, int]:
    """What replaces ``text[i]`` (and ``text[i + 1]`` for a swap), and how many chars it used."""
    ch = text[i]
    if kind == "substitute":
        return _neighbour(ch, rng), 1
    if kind == "swap":
        return text[i + 1] + ch, 2
    if kind == "drop":
        return "", 1
    return ch + ch, 1


def _typo_positions(text: str) -> list[int]:
    return [i for i, ch in enumerate(text) if ch.isalpha()]


def _typo_at(text: str, pos: int, rng: random.Random) -> str:
    piece, used = _apply_typo(text, pos, rng.choice(_typo_options(text, pos)), rng)
    return text[:pos] + piece + text[pos + used :]


@register_text_perturbation("typo")
def typo(text: str, rng: random.Random, rate: float) -> str:
    """Make a keyboard typo on each letter (``str.isalpha``) w.p. ``rate``.

    The typo kind is chosen uniformly among those that change the text at that letter:
    substitution by a US-QWERTY neighbour key with the same case (ASCII letters only), swap with
    the next character (only when that is a different letter; the swapped-in letter then gets no
    typo of its own), drop, or repeat. Each typo changes the length by at most one, and non-letter
    characters are never changed, added, removed or reordered.
    """
    _check_rate(rate)
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i].isalpha() and rng.random() < rate:
            piece, used = _apply_typo(text, i, rng.choice(_typo_options(text, i)), rng)
        else:
            piece, used = text[i], 1
        out.append(piece)
        i += used
    return "".join(out)


_FORCERS.update(
    {
        "zero_width": (_zero_width_gaps, _zero_width_at),
        "confusable": (_confusable_positions, _confusable_at),
        "markup": (_markup_words, _markup_at),
        "typo": (_typo_positions, _typo_at),
    }
)

#: How :func:`perturb_segments` applies a kind to one segment where that differs from the
#: registered function (markup: no per-segment minimum; the whole prompt gets one instead).
_SEGMENT_APPLY: dict[str, TextPerturbation] = {
    "markup": lambda text, rng, rate: _markup(text, rng, rate, at_least_one=False),
}


# --------------------------------------------------------------------------------------------
# configuration and prompt-level application


def segment_in_scope(segment: Segment, scope: str) -> bool:
    """Whether a text perturbation with this scope may change ``segment``.

    Protected segments never are. ``"all"``: every unprotected segment. ``"query"``: unprotected
    segments whose role starts with ``"query"`` (``query``, ``query_text``, ...), so the task
    definition, demonstrations and plain ``"text"`` segments are left alone.
    """
    if segment.protected:
        return False
    if scope == "all":
        return True
    if scope == "query":
        return segment.role.startswith("query")
    raise TextPerturbError(f"unknown scope {scope!r}; allowed: {', '.join(SCOPES)}")


@dataclass(frozen=True)
class TextPerturbConfig:
    """Which text perturbations a variant may get, how likely each is, how strong, and where.

    ``kinds``: names in :data:`TEXT_PERTURBATIONS`; ``weights``: non-negative, one per kind, not
    all zero (``None``: uniform); ``rate``: per-position probability in (0, 1]; ``scope``:
    ``"all"`` or ``"query"`` (see :func:`segment_in_scope`).
    """

    kinds: tuple[str, ...] = ("zero_width", "confusable", "markup", "typo")
    weights: tuple[float, ...] | None = None
    rate: float = 0.05
    scope: str = "all"

    def __post_init__(self) -> None:
        allowed = ", ".join(sorted(TEXT_PERTURBATIONS))
        if isinstance(self.kinds, str):
            raise TextPerturbError(
                f"kinds must be a sequence of kind names, not the string {self.kinds!r}; "
                f"allowed kinds: {allowed}"
            )
        object.__setattr__(self, "kinds", tuple(self.kinds))
        if not self.kinds:
            raise TextPerturbError(f"kinds must not be empty; allowed kinds: {allowed}")
        for kind in self.kinds:
            if kind not in TEXT_PERTURBATIONS:
                raise TextPerturbError(
                    f"unknown text perturbation kind {kind!r}; allowed: {allowed}"
                )
        rate = self.rate
        if (
            isinstance(rate, bool)
            or not isinstance(rate, int | float)
            or not (0.0 < rate <= 1.0)  # also rejects NaN
        ):
            raise TextPerturbError(f"rate must be a number in (0, 1], got {rate!r}")
        if self.weights is not None:
            weights = tuple(self.weights)
            object.__setattr__(self, "weights", weights)
            if len(weights) != len(self.kinds):
                raise TextPerturbError(
                    f"weights has {len(weights)} entries but kinds has {len(self.kinds)}; "
                    "give one weight per kind"
                )
            for w in weights:
                if (
                    isinstance(w, bool)
                    or not isinstance(w, int | float)
                    or not math.isfinite(w)
                    or w < 0
                ):
                    raise TextPerturbError(
                        f"weights must be finite numbers >= 0, got {w!r} in {weights!r}"
                    )
            if sum(weights) <= 0:
                raise TextPerturbError(f"weights must not all be zero, got {weights!r}")
        if self.scope not in SCOPES:
            raise TextPerturbError(f"unknown scope {self.scope!r}; allowed: {', '.join(SCOPES)}")

    def in_scope(self, segment: Segment) -> bool:
        """Whether ``segment`` may be changed under this config's scope."""
        return segment_in_scope(segment, self.scope)


def perturb_segments(
    segments: Sequence[Segment], config: TextPerturbConfig, rng: random.Random
) -> tuple[list[Segment], str]:
    """Apply one text perturbation, chosen with ``rng``, to the in-scope segments of a prompt.

    The kind is drawn from ``config.kinds`` by ``config.weights`` (uniform if ``None``) and is
    applied at ``config.rate`` to every segment for which :meth:`TextPerturbConfig.in_scope` holds;
    the others (all protected ones included) come back unchanged, as the same objects. If that
    changed nothing, exactly one change is made at a position chosen uniformly among all the
    eligible positions of the in-scope segments, so the variant differs from the clean prompt
    whenever any eligible text exists (for markup this replaces the per-call at-least-one-word
    rule). Returns the new segments and the kind's name.
    """
    kind = rng.choices(config.kinds, weights=config.weights, k=1)[0]
    apply = _SEGMENT_APPLY.get(kind, TEXT_PERTURBATIONS[kind])
    out: list[Segment] = []
    in_scope: list[int] = []
    changed = False
    for idx, seg in enumerate(segments):
        if not config.in_scope(seg):
            out.append(seg)
            continue
        in_scope.append(idx)
        new_text = apply(seg.text, rng, config.rate)
        if new_text != seg.text:
            changed = True
            out.append(replace(seg, text=new_text))
        else:
            out.append(seg)
    if not changed and kind in _FORCERS:
        eligible_of, change_at = _FORCERS[kind]
        sites = [(idx, pos) for idx in in_scope for pos in eligible_of(segments[idx].text)]
        if sites:
            idx, pos = rng.choice(sites)
            seg = segments[idx]
            out[idx] = replace(seg, text=change_at(seg.text, pos, rng))
    return out, kind
