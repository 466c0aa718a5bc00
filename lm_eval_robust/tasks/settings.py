"""The ``--metadata`` settings of both task families (NI and generation), and their parsing.

:class:`NIConfig` and :class:`GenConfig` live here, side by side, because each refuses a key that
neither family knows (the harness passes every key to every task). Each parser raises the
caller's :class:`UserError` subclass with one line naming the setting, the value given and a
working example.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.base.validate import model_arg_names, nearest
from lm_eval_robust.tasks.perturb.text import TEXT_PERTURBATIONS


def metadata_int(
    md: Mapping[str, Any], key: str, default: int | None, minimum: int, error: type[UserError]
) -> int | None:
    """``md[key]`` (or ``default``) as an integer >= ``minimum``; None stays None."""
    raw = md.get(key, default)
    if raw is None:
        return None
    hint = f"e.g. --metadata {key}={max(minimum, 10)}"
    value: int | None = None
    if not (isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer())):
        try:
            value = int(str(raw).strip()) if isinstance(raw, str) else int(raw)
        except (TypeError, ValueError):
            value = None
    if value is None:
        raise error(f"{key} must be an integer >= {minimum}, got {raw!r}; {hint}")
    if value < minimum:
        raise error(f"{key} must be an integer >= {minimum}, got {value}; {hint}")
    return value


def text_settings(
    md: Mapping[str, Any],
    kinds: Sequence[str],
    rate: float,
    scope: str,
    error: type[UserError],
) -> tuple[tuple[str, ...], float, str]:
    """``text_kinds`` (comma or ``+`` list), ``text_rate`` in (0, 1] and ``text_scope``."""
    raw_kinds = md.get("text_kinds", kinds)
    if isinstance(raw_kinds, str):
        raw_kinds = [k.strip() for k in raw_kinds.replace("+", ",").split(",") if k.strip()]
    parsed = tuple(raw_kinds)
    unknown = [k for k in parsed if k not in TEXT_PERTURBATIONS]
    if unknown or not parsed:
        raise error(
            f"unknown text perturbation kind(s) {unknown}; known: {sorted(TEXT_PERTURBATIONS)}"
        )
    raw_rate = md.get("text_rate", rate)
    try:
        value = float(raw_rate)
    except (TypeError, ValueError):
        value = math.nan
    if not 0 < value <= 1:  # NaN fails too
        raise error(f"text_rate must be a number in (0, 1], got {raw_rate!r}")
    parsed_scope = str(md.get("text_scope", scope))
    if parsed_scope not in ("all", "query"):
        raise error(f"unknown text_scope {parsed_scope!r}; use one of all, query")
    return parsed, value, parsed_scope


class TaskConfigError(UserError):
    """A task setting that cannot be used; the message names it and the fix."""


#: ``auto``: whatever the run does (plain prompt, or the model's chat template under
#: ``--apply_chat_template``); ``plain`` / ``chat``: the same, but ``debiased_hf`` refuses a run
#: whose prompts are not in that style.
PROMPT_STYLES: tuple[str, ...] = ("auto", "plain", "chat")

#: ``nested``: each example gets its own seeded draw of perturbations (the paper's design);
#: ``crossed``: every example of a split gets the same perturbations (the same formats, in the
#: same order; text perturbation ``j`` of every example is of kind ``text_kinds[(j-1) % n]``), so
#: the accuracy of one format or kind is over the same examples as every other's.
DESIGNS: tuple[str, ...] = ("nested", "crossed")


@dataclass(frozen=True)
class NIConfig:
    """Protocol settings (paper, Section 4): all overridable with ``--metadata key=value``."""

    n_examples: int = 200
    n_perturbations: int = 200
    n_shots: int = 2
    seed: int = 1234
    format_pool: int = 200
    split_fractions: tuple[float, float, float] = (0.5, 0.35, 0.15)
    text_rate: float = 0.05
    text_kinds: tuple[str, ...] = ("zero_width", "confusable", "markup", "typo")
    text_scope: str = "all"
    prompt_style: str = "auto"
    design: str = "nested"
    data_dir: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any]) -> NIConfig:
        def as_int(key: str, minimum: int) -> int:
            return metadata_int(md, key, getattr(cls, key), minimum, TaskConfigError) or 0

        check_metadata_keys(md, TaskConfigError)
        kinds, rate, scope = text_settings(
            md, cls.text_kinds, cls.text_rate, cls.text_scope, TaskConfigError
        )
        style = str(md.get("prompt_style", cls.prompt_style)).strip().lower()
        if style not in PROMPT_STYLES:
            raise TaskConfigError(
                f"unknown prompt_style {style!r}; use one of {', '.join(PROMPT_STYLES)}"
            )
        design = str(md.get("design", cls.design)).strip().lower()
        if design not in DESIGNS:
            near = nearest(design, DESIGNS)
            hint = f"did you mean {near!r}? " if near else ""
            raise TaskConfigError(
                f"unknown design {design!r}; {hint}use one of {', '.join(DESIGNS)} "
                "(e.g. --metadata design=crossed)"
            )
        data_dir = md.get("data_dir")
        return cls(
            n_examples=as_int("n_examples", 3),
            n_perturbations=as_int("n_perturbations", 1),
            n_shots=as_int("n_shots", 0),
            seed=as_int("seed", 0),
            format_pool=as_int("format_pool", 3),
            text_rate=rate,
            text_kinds=kinds,
            text_scope=scope,
            prompt_style=style,
            design=design,
            data_dir=str(data_dir) if data_dir not in (None, "") else None,
        )


class GenConfigError(UserError):
    """A generation-task setting that cannot be used."""


@dataclass(frozen=True)
class GenConfig:
    """Protocol settings (paper, Appendix F.4), all overridable with ``--metadata``."""

    n_examples: int = 275
    n_train: int = 100
    n_perturbations: int = 100
    n_fit_perturbations: int = 30
    n_shots: int | None = None  # None: the task's default
    seed: int = 1234
    text_rate: float = 0.05
    text_kinds: tuple[str, ...] = ("zero_width", "confusable", "markup", "typo")
    text_scope: str = "all"
    max_doc_words: int = 0  # XSum: keep the first N words of the article (0: all)
    data_dir: str | None = None

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any]) -> GenConfig:
        def as_int(key: str, minimum: int, default: int | None) -> int | None:
            return metadata_int(md, key, default, minimum, GenConfigError)

        check_metadata_keys(md, GenConfigError)
        kinds, rate, scope = text_settings(
            md, cls.text_kinds, cls.text_rate, cls.text_scope, GenConfigError
        )
        data_dir = md.get("data_dir")
        cfg = cls(
            n_examples=as_int("n_examples", 2, cls.n_examples) or 0,
            n_train=as_int("n_train", 1, cls.n_train) or 0,
            n_perturbations=as_int("n_perturbations", 2, cls.n_perturbations) or 0,
            n_fit_perturbations=as_int("n_fit_perturbations", 1, cls.n_fit_perturbations) or 0,
            n_shots=as_int("n_shots", 0, None),
            seed=as_int("seed", 0, cls.seed) or 0,
            text_rate=rate,
            text_kinds=kinds,
            text_scope=scope,
            max_doc_words=as_int("max_doc_words", 0, 0) or 0,
            data_dir=str(data_dir) if data_dir not in (None, "") else None,
        )
        if cfg.n_train >= cfg.n_examples:
            raise GenConfigError(
                f"n_train={cfg.n_train} leaves no test examples of n_examples={cfg.n_examples}; "
                "lower n_train or raise n_examples"
            )
        if cfg.n_fit_perturbations >= cfg.n_perturbations:
            raise GenConfigError(
                f"n_fit_perturbations={cfg.n_fit_perturbations} leaves no evaluation "
                f"perturbations of n_perturbations={cfg.n_perturbations}; lower it"
            )
        return cfg

    def pert_ids(self, split: str) -> range:
        """Perturbation ids of a split: 1..n_fit for train, n_fit+1..n_perturbations for test."""
        if split == "train":
            return range(1, self.n_fit_perturbations + 1)
        return range(self.n_fit_perturbations + 1, self.n_perturbations + 1)


# ---------------------------------------------------------------------------------------------
# keys

#: keys lm-eval itself puts into every task's metadata
HARNESS_KEYS = ("version", "config_source", "config", "_metadata", "num_fewshot")


def task_setting_names() -> set[str]:
    """Every ``--metadata`` key of our task families (NI and generation)."""
    names = {f.name for f in fields(NIConfig)} | {f.name for f in fields(GenConfig)}
    # local_data: a folder of local dataset copies for any task
    # (lm_eval_robust.tasks.wrap.local_data)
    return (names - {"extra", "split_fractions"}) | {"local_data"}


def check_metadata_keys(md: Mapping[str, Any], error: type[UserError]) -> None:
    """Refuse a misspelt setting with the nearest valid key.

    The harness merges ``--model_args`` into every task's metadata and passes keys of either of
    our task families to both, so model args and the other family's settings are accepted.
    """
    ours = task_setting_names()
    left = [k for k in md if not str(k).startswith("lmer_") and k not in ours]
    left = [k for k in left if k not in HARNESS_KEYS]
    if left:
        models = model_arg_names()  # imports the model class: only when needed
        left = [k for k in left if k not in models]
    for key in left:
        near = nearest(str(key), ours)
        hint = f"did you mean {near!r}? " if near else ""
        raise error(
            f"unknown setting {key!r} in --metadata; {hint}(valid: {', '.join(sorted(ours))})"
        )
