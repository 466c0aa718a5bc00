"""The format parts of a rendered prompt, and the prompt re-rendered in another format.

lm-eval renders a prompt from a task's templates; the wrapper sees only the rendered text. It
finds FormatSpread's parts in it (Sclar et al. 2023, the grammar of
:mod:`lm_eval_robust.tasks.perturb.format`):

* **field descriptors**: a line that starts with one to three words and a colon (``Q:``,
  ``Question:``, ``Answer:``, ``  choice:``); the colon and the space after it are the
  *separator*, the words take a *casing*;
* **field breaks**: the single newline before a descriptor line (the space between fields);
* **option enumerators**: two or more consecutive lines starting ``A.``, ``(A)``, ``a)``, ``1.``,
  ... with consecutive labels: the *item wrapper* around the label;
* the **target delimiter** (before a scored choice or a demo's answer) and the **few-shot
  delimiter** (between demonstrations), which the harness itself re-renders from the task config.

A :class:`PromptFormat` picks one value for each. Values come from FormatSpread's sets (the
separators, spaces, casings and item wrappers of ``tasks.perturb.format``), with its validity rules
that apply here: a separator is never empty, and a separator with a newline needs a field space with
one. Option labels keep their letters or numbers (they may be what the harness scores), only the
wrapper around them changes. The clean prompt is the one the harness rendered; a format equal to
it in every part a prompt has renders the clean prompt, so the caller moves on to the next one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from lm_eval_robust.tasks.perturb.format import (
    CASINGS,
    ITEM_WRAPPERS,
    SEPARATORS,
    SPACES,
    apply_casing,
)
from lm_eval_robust.tasks.perturb.rng import seeded_rng

__all__ = [
    "FEWSHOT_DELIMITERS",
    "TARGET_DELIMITERS",
    "Parts",
    "PromptFormat",
    "find_parts",
    "protected_spans",
    "render_parts",
    "sample_prompt_formats",
    "split_prompt_formats",
]

#: delimiters before an answer (a scored choice, a demo's target)
TARGET_DELIMITERS: tuple[str, ...] = (" ", "\n", "  ", "\t")
#: delimiters between demonstrations: FormatSpread's spaces that hold a line break, and blank lines
FEWSHOT_DELIMITERS: tuple[str, ...] = tuple(
    dict.fromkeys(["\n\n", "\n\n\n", *(s for s in SPACES if "\n" in s)])
)

_DESCRIPTOR = re.compile(
    r"^(?P<indent>[ \t]*)(?P<desc>[A-Za-z][\w'/-]*(?: [A-Za-z][\w'/-]*){0,2})"
    r":(?!//)(?P<after>[ \t]?)",
    re.MULTILINE,
)
_ENUM = re.compile(
    r"^(?P<indent>[ \t]*)(?:\((?P<p>[A-Za-z]|\d{1,2})\)|(?P<b>[A-Za-z]|\d{1,2})[.)\]])(?=[ \t]+\S)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Descriptor:
    start: int  # of the descriptor words (after the indent)
    end: int  # after the colon and the space that follows it
    words: str
    at_line_end: bool  # nothing but a line break (or the end) follows


@dataclass(frozen=True)
class Marker:
    start: int
    end: int
    label: str


@dataclass(frozen=True)
class Parts:
    """The parts found in one rendered prompt."""

    descriptors: tuple[Descriptor, ...]
    breaks: tuple[int, ...]  # positions of field-break newlines
    markers: tuple[Marker, ...]

    @property
    def found(self) -> bool:
        """Whether the prompt has any field descriptor or option enumerator."""
        return bool(self.descriptors or self.markers)


def _next_label(label: str) -> str:
    return str(int(label) + 1) if label.isdigit() else chr(ord(label) + 1)


def _enum_runs(text: str) -> list[Marker]:
    """Markers in runs of >= 2 consecutive lines with consecutive labels from A/a/1."""
    found = [
        (
            m.start(),
            Marker(m.start() + len(m.group("indent")), m.end(), m.group("p") or m.group("b")),
        )
        for m in _ENUM.finditer(text)
    ]
    out: list[Marker] = []
    run: list[Marker] = []

    def flush() -> None:
        if len(run) >= 2:
            out.extend(run)

    for line_start, mk in found:
        follows = (
            run
            and mk.label == _next_label(run[-1].label)
            and "\n" not in text[run[-1].end : line_start - 1]
            and text[line_start - 1 : line_start] == "\n"
        )
        if follows:
            run.append(mk)
            continue
        flush()
        run = [mk] if mk.label in ("A", "a", "1") else []
    flush()
    return out


def find_parts(text: str) -> Parts:
    """Field descriptors, field breaks and option enumerators of a rendered prompt."""
    markers = _enum_runs(text)
    marked = {m.start for m in markers}
    descriptors = []
    breaks = []
    for m in _DESCRIPTOR.finditer(text):
        start = m.start("desc")
        if start in marked:
            continue
        end = m.end()
        rest = text[end : end + 1]
        descriptors.append(Descriptor(start, end, m.group("desc"), rest in ("", "\n")))
        line = m.start()
        if line >= 1 and text[line - 1] == "\n" and (line < 2 or text[line - 2] != "\n"):
            breaks.append(line - 1)
    return Parts(tuple(descriptors), tuple(breaks), tuple(markers))


def protected_spans(parts: Parts) -> list[tuple[int, int]]:
    """Spans a text perturbation must leave alone: descriptors and option markers."""
    spans = [(d.start, d.end) for d in parts.descriptors]
    spans += [(m.start, m.end) for m in parts.markers]
    return sorted(spans)


@dataclass(frozen=True)
class PromptFormat:
    """One value per format part of a rendered prompt."""

    separator: str
    casing: str
    field_space: str
    item_wrapper: str
    target_delimiter: str
    fewshot_delimiter: str

    @property
    def format_id(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True, ensure_ascii=True)
        return hashlib.sha256(text.encode("ascii")).hexdigest()[:12]

    def is_valid(self) -> bool:
        """FormatSpread's rules that apply: a non-empty separator; a line break in the separator
        needs one in the field space (rule 3); non-empty field space (rule 2)."""
        if self.separator == "" or self.field_space == "":
            return False
        return not ("\n" in self.separator and "\n" not in self.field_space)


def sample_prompt_formats(n: int, seed: object) -> list[PromptFormat]:
    """``n`` distinct valid formats, each attribute drawn uniformly (seeded), invalid redrawn."""
    rng = seeded_rng("lm_eval_robust.tasks.wrap.formats", seed)
    seps = [s for s in SEPARATORS if s]
    spaces = list(dict.fromkeys(s for s in SPACES if s))
    out: list[PromptFormat] = []
    seen: set[PromptFormat] = set()
    for _ in range(200 * (n + 10)):
        if len(out) == n:
            break
        fmt = PromptFormat(
            separator=rng.choice(seps),
            casing=rng.choice(CASINGS),
            field_space=rng.choice(spaces),
            item_wrapper=rng.choice(ITEM_WRAPPERS),
            target_delimiter=rng.choice(TARGET_DELIMITERS),
            fewshot_delimiter=rng.choice(FEWSHOT_DELIMITERS),
        )
        if fmt in seen or not fmt.is_valid():
            continue
        seen.add(fmt)
        out.append(fmt)
    return out


def split_prompt_formats(
    formats: Sequence[PromptFormat], fractions: Sequence[float], seed: object
) -> dict[str, list[PromptFormat]]:
    """Disjoint seeded train/test/holdout sets (largest-remainder sizes), as the paper."""
    total = len(formats)
    raw = [f * total for f in fractions]
    sizes = [int(r) for r in raw]
    for k in sorted(range(3), key=lambda k: (-(raw[k] - sizes[k]), k))[: total - sum(sizes)]:
        sizes[k] += 1
    items = list(formats)
    seeded_rng("lm_eval_robust.tasks.wrap.format_split", seed).shuffle(items)
    a, b = sizes[0], sizes[0] + sizes[1]
    return {"train": items[:a], "test": items[a:b], "holdout": items[b:]}


def render_parts(text: str, fmt: PromptFormat, parts: Parts | None = None) -> str:
    """``text`` with its descriptors, field breaks and option markers in ``fmt``.

    A descriptor followed by content takes ``casing(words) + separator``; one at a line's end or
    at the prompt's end (the answer cue, after which the target delimiter follows) takes
    ``casing(words) + separator.rstrip()``.
    """
    parts = find_parts(text) if parts is None else parts
    edits: list[tuple[int, int, str]] = []
    for d in parts.descriptors:
        sep = fmt.separator.rstrip() if d.at_line_end else fmt.separator
        edits.append((d.start, d.end, apply_casing(fmt.casing, d.words) + sep))
    edits += [(b, b + 1, fmt.field_space) for b in parts.breaks]
    edits += [(m.start, m.end, fmt.item_wrapper.replace("{x}", m.label)) for m in parts.markers]
    out = []
    pos = 0
    for start, end, new in sorted(edits):
        if start < pos:  # overlapping edits never happen with these patterns; keep the first
            continue
        out.append(text[pos:start])
        out.append(new)
        pos = end
    out.append(text[pos:])
    return "".join(out)
