"""The Natural Instructions tasks we perturb: how to parse each instance into fields.

Each task declares a format *structure* (fields, an options enumeration, the answer field), a
regex that pulls the fields out of an NI ``input`` string, its label set, and (for multiple-choice
tasks whose answer is an option marker) an instruction template whose ``{0}``, ``{1}``... are
filled with the current format's option labels (the original Definition names fixed markers such as
"Option 1" or "A", which a format change renumbers). Instances that do not parse are skipped.

Label words are scored as the first token after the answer cue. Where a label's first token is
shared or the label is long, ``scored`` gives the verbalizer: the string actually scored (for
task322, "Non-threat" is scored by its first word piece "Non").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.tasks.perturb.format import (
    Answer,
    Enumeration,
    EnumFormat,
    Field,
    Format,
    Header,
    Spacing,
)

Values = dict[str, str | list[str]]


@dataclass(frozen=True)
class TaskSpec:
    """One NI task: file name, structure, parser and labels."""

    short: str  # "ni065"
    file: str  # NI task file stem
    structure: Spacing
    parse: Callable[[str], Values | None]
    clean_format: Format
    labels: tuple[str, ...] = ()  # fixed label words (classification tasks)
    scored: tuple[str, ...] = ()  # verbalizer: what is scored for each label (default: labels)
    options_key: str | None = None  # multiple choice: gold is an index into values[options_key]
    gold_map: Callable[[str], int | None] | None = None  # NI output -> option index (MC tasks)
    instruction: str | None = None  # MC: Definition rewritten with {0}, {1}... for option labels
    notes: str = ""
    protect_words: tuple[str, ...] = field(default=())

    @property
    def is_multiple_choice(self) -> bool:
        return self.options_key is not None


def _strip(parts: tuple[str, ...]) -> list[str]:
    return [" ".join(p.split()) for p in parts]


def _regex_parser(pattern: str, keys: tuple[str, ...]) -> Callable[[str], Values | None]:
    rx = re.compile(pattern, re.DOTALL)

    def parse(text: str) -> Values | None:
        m = rx.fullmatch(text.strip())
        if m is None:
            return None
        vals = _strip(m.groups())
        if any(not v for v in vals):
            return None
        return dict(zip(keys, vals, strict=True))

    return parse


def _with_options(
    pattern: str, keys: tuple[str, ...], opt_keys: tuple[str, ...]
) -> Callable[[str], Values | None]:
    """Parse fields, then gather ``opt_keys`` into one ``options`` list."""
    inner = _regex_parser(pattern, keys + opt_keys)

    def parse(text: str) -> Values | None:
        vals = inner(text)
        if vals is None:
            return None
        out: Values = {k: vals[k] for k in keys}
        out["options"] = [str(vals[k]) for k in opt_keys]
        return out

    return parse


def _lettered_options(stem_key: str, letters: str, pattern_prefix: str = "") -> Callable:
    """Parse ``<stem> (A) x (B) y ...`` with exactly the given letters, in order."""
    opts = "".join(rf"\s*\({c}\)(.*?)" for c in letters[:-1]) + rf"\s*\({letters[-1]}\)(.*)"
    return _with_options(
        pattern_prefix + r"(.*?)" + opts, (stem_key,), tuple(f"opt{c}" for c in letters)
    )


def _index_of(markers: tuple[str, ...]) -> Callable[[str], int | None]:
    def gold(output: str) -> int | None:
        o = output.strip()
        return markers.index(o) if o in markers else None

    return gold


def _enum(
    number_format: str, wrapper: str = "({x})", space: str = " ", sep: str = ""
) -> EnumFormat:
    return EnumFormat(
        space=space, sep_text_and_option=sep, item_wrapper=wrapper, number_format=number_format
    )


def _clean(n_spacings: int, enums: tuple[EnumFormat, ...] = ()) -> Format:
    """The unperturbed format: ``Descriptor: text`` lines, original option markers."""
    return Format(separator=": ", casing="identity", spaces=("\n",) * n_spacings, enums=enums)


SPECS: dict[str, TaskSpec] = {}


def _add(spec: TaskSpec) -> None:
    SPECS[spec.short] = spec


_add(
    TaskSpec(
        short="ni065",
        file="task065_timetravel_consistent_sentence_classification",
        structure=Spacing(
            (
                Field("Sentence 1", "s1"),
                Field("Sentence 3", "s3"),
                Field("Sentence 4", "s4"),
                Field("Sentence 5", "s5"),
                Enumeration("Option", "options"),
                Answer(),
            )
        ),
        parse=_with_options(
            r"Sentence 1:(.*?)Sentence 3:(.*?)Sentence 4:(.*?)Sentence 5:(.*?)"
            r"Option 1:(.*?)Option 2:(.*)",
            ("s1", "s3", "s4", "s5"),
            ("o1", "o2"),
        ),
        clean_format=_clean(1, (_enum("arabic", space="\n", sep=" "),)),
        options_key="options",
        gold_map=_index_of(("Option 1", "Option 2")),
        instruction=(
            "In this task, you are given a short story consisting of exactly 5 sentences where "
            "the second sentence is missing. You are given two options and you need to select "
            "the one that best connects the first sentence with the rest of the story. Indicate "
            "your answer by '{0}' if the first option is correct, otherwise '{1}'. The incorrect "
            "option will change the subsequent storyline, so that at least one of the three "
            "subsequent sentences is no longer consistent with the story."
        ),
    )
)

_add(
    TaskSpec(
        short="ni069",
        file="task069_abductivenli_classification",
        structure=Spacing(
            (
                Field("Beginning", "beginning"),
                Enumeration("Middle", "options"),
                Field("Ending", "ending"),
                Answer(),
            )
        ),
        parse=lambda text: _parse_069(text),
        clean_format=_clean(1, (_enum("arabic", space="\n", sep=" "),)),
        options_key="options",
        gold_map=_index_of(("1", "2")),
        instruction=(
            "In this task, you will be shown a short story with a beginning, two potential "
            "middles, and an ending. Your job is to choose the middle statement that makes the "
            'story coherent / plausible by writing "{0}" or "{1}" in the output. If both '
            "sentences are plausible, pick the one that makes most sense."
        ),
    )
)

_p069 = _regex_parser(
    r"Beginning:(.*?)Middle 1:(.*?)Middle 2:(.*?)Ending:(.*)", ("beginning", "m1", "m2", "ending")
)


def _parse_069(text: str) -> Values | None:
    v = _p069(text)
    if v is None:
        return None
    return {
        "beginning": v["beginning"],
        "options": [str(v["m1"]), str(v["m2"])],
        "ending": v["ending"],
    }


_add(
    TaskSpec(
        short="ni1297",
        file="task1297_qasc_question_answering",
        structure=Spacing(
            (
                Field("Fact1", "fact1"),
                Field("Fact2", "fact2"),
                Field("Question", "question"),
                Spacing((Header("Options"), Enumeration("", "options")), whitespace_only=True),
                Answer(),
            )
        ),
        parse=lambda text: _parse_1297(text),
        clean_format=_clean(2, (_enum("upper_letter"),)),
        options_key="options",
        gold_map=_index_of(tuple("ABCDEFGH")),
        instruction=(
            "In this task, you are given two facts, and a multiple-choice question. Based on the "
            'given facts, answer the question with index of the correct option (e.g, "{0}").'
        ),
    )
)

_p1297_head = re.compile(r"Fact1:(.*?),\s*Fact2:(.*?),\s*Question:(.*)", re.DOTALL)
_p1297_opts = _lettered_options("question", "ABCDEFGH")


def _parse_1297(text: str) -> Values | None:
    m = _p1297_head.fullmatch(text.strip())
    if m is None:
        return None
    rest = _p1297_opts(m.group(3))
    if rest is None:
        return None
    f1, f2 = _strip((m.group(1), m.group(2)))
    if not f1 or not f2:
        return None
    return {"fact1": f1, "fact2": f2, "question": rest["question"], "options": rest["options"]}


_add(
    TaskSpec(
        short="ni1286",
        file="task1286_openbookqa_question_answering",
        structure=Spacing(
            (
                Field("Question", "question"),
                Spacing((Header("Options"), Enumeration("", "options")), whitespace_only=True),
                Answer(),
            )
        ),
        parse=_lettered_options("question", "ABCD"),
        clean_format=_clean(2, (_enum("upper_letter"),)),
        options_key="options",
        gold_map=_index_of(tuple("ABCD")),
        instruction=(
            "In this task, you are given a multiple-choice question and you have to pick the "
            'correct option. Answer with option indexes (i.e., "{0}", "{1}", "{2}", and "{3}").'
        ),
        notes="The paper's task '286' (OpenBookQA) is NI task1286.",
    )
)

_add(
    TaskSpec(
        short="ni296",
        file="task296_storycloze_correct_end_classification",
        structure=Spacing(
            (
                Field("Sentence1", "s1"),
                Field("Sentence2", "s2"),
                Field("Sentence3", "s3"),
                Field("Sentence4", "s4"),
                Spacing((Header("Options"), Enumeration("", "options")), whitespace_only=True),
                Answer(),
            )
        ),
        parse=_with_options(
            r"Sentence1:(.*?)Sentence2:(.*?)Sentence3:(.*?)Sentence4:(.*?)\(A\)(.*?)\(B\)(.*)",
            ("s1", "s2", "s3", "s4"),
            ("oA", "oB"),
        ),
        clean_format=_clean(2, (_enum("upper_letter"),)),
        options_key="options",
        gold_map=_index_of(("A", "B")),
        instruction=(
            "In this task, you're given four sentences of a story written in natural language. "
            "The given story is not complete and your job is to complete the story by selecting "
            "one of the sentence choices from {0} and {1}, such that the story sounds fully "
            "coherent."
        ),
    )
)

_add(
    TaskSpec(
        short="ni220",
        file="task220_rocstories_title_classification",
        structure=Spacing(
            (
                Field("Sentence 1", "s1"),
                Field("Sentence 2", "s2"),
                Field("Sentence 3", "s3"),
                Field("Sentence 4", "s4"),
                Field("Sentence 5", "s5"),
                Spacing((Header("Choices"), Enumeration("", "options")), whitespace_only=True),
                Answer(),
            )
        ),
        parse=_with_options(
            r"Sentence 1:(.*?)Sentence 2:(.*?)Sentence 3:(.*?)Sentence 4:(.*?)Sentence 5:(.*?)"
            r"Choices:\s*a\.(.*?)\s+b\.(.*)",
            ("s1", "s2", "s3", "s4", "s5"),
            ("oa", "ob"),
        ),
        clean_format=_clean(2, (_enum("lower_letter", wrapper="{x}."),)),
        options_key="options",
        gold_map=_index_of(("a", "b")),
        instruction=(
            "In this task, you're given five sentences, numbered 1 through 5, and two options "
            "{0} and {1} for possible titles for the story. Your job is to choose the title that "
            "better fits the story. Indicate your choice by '{0}' or '{1}'."
        ),
    )
)

_add(
    TaskSpec(
        short="ni280",
        file="task280_stereoset_classification_stereotype_type",
        structure=Spacing((Field("Passage", "passage"), Answer())),
        parse=_regex_parser(r"Passage:(.*)", ("passage",)),
        clean_format=_clean(1),
        labels=("Gender", "Profession", "Race", "Religion"),
        protect_words=("gender", "profession", "race", "religion"),
    )
)

_add(
    TaskSpec(
        short="ni158",
        file="task158_count_frequency_of_words",
        structure=Spacing((Field("Sentence", "sentence"), Field("Word", "word"), Answer())),
        parse=_regex_parser(
            r"Sentence:\s*'(.*)'\.\s*Count the occurrences of the word '(.*?)' in the given "
            r"sentence\.",
            ("sentence", "word"),
        ),
        clean_format=_clean(1),
        labels=("0", "1", "2", "3", "4", "5"),
    )
)

_add(
    TaskSpec(
        short="ni322",
        file="task322_jigsaw_classification_threat",
        structure=Spacing((Field("Comment", "comment"), Answer())),
        parse=_regex_parser(r"Comment:(.*)", ("comment",)),
        clean_format=_clean(1),
        labels=("Threat", "Non-threat"),
        scored=("Threat", "Non"),
        protect_words=("threat", "non-threat"),
        notes="'Non-threat' is scored by its first word piece 'Non' (verbalizer).",
    )
)

_add(
    TaskSpec(
        short="ni1284",
        file="task1284_hrngo_informativeness_classification",
        structure=Spacing(
            (Field("System Reference", "system"), Field("Original Reference", "original"), Answer())
        ),
        parse=_regex_parser(
            r"System Reference:(.*?)Original Reference:(.*)", ("system", "original")
        ),
        clean_format=_clean(1),
        labels=("0", "1"),
    )
)

TASK_ORDER: tuple[str, ...] = (
    "ni065",
    "ni069",
    "ni1297",
    "ni280",
    "ni1286",
    "ni296",
    "ni220",
    "ni158",
    "ni322",
    "ni1284",
)


def get_spec(name: str) -> TaskSpec:
    """The spec of a task alias (``ni065``, ``065`` or ``task065``), or a one-line error."""
    key = name.strip().lower().removeprefix("task").removeprefix("ni")
    short = f"ni{key}"
    if short not in SPECS:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(TASK_ORDER)}")
    return SPECS[short]
