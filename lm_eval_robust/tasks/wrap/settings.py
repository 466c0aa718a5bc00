"""``--metadata`` settings of a wrapped task (``<task>_robust_text`` / ``<task>_robust_format``).

The harness merges the task's YAML ``metadata``, ``--model_args`` and ``--metadata`` into one
dict; the keys read here are the NI tasks' names for the same things. Every other key is left to
the wrapped task (its ``version``, the model args, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.tasks.settings import metadata_int, text_settings

__all__ = ["WrapError", "WrapSettings"]

SPLIT_FRACTIONS = (0.5, 0.35, 0.15)


class WrapError(UserError):
    """A wrapped task that cannot be built (name, output type, data, setting)."""


@dataclass(frozen=True)
class WrapSettings:
    """How a wrapped task perturbs its prompts.

    ``n_perturbations``: perturbed prompts per example (K); ``n_examples``: a seeded sample of
    this many examples of the split, kept in the task's order (0: all); ``format_pool``: formats
    sampled per task before the disjoint 50/35/15 train/test/hold-out split; ``text_*``: as the
    NI tasks;
    ``local_data``: a folder of local copies of the task's data (:mod:`.local_data`);
    ``design``: ``crossed`` (default: the j-th perturbation of every example is the same format,
    or the same text-perturbation kind, so variants are compared on the same examples) or
    ``nested`` (each example draws its own).
    """

    n_perturbations: int = 8
    n_examples: int = 0
    seed: int = 1234
    format_pool: int = 100
    text_rate: float = 0.05
    text_kinds: tuple[str, ...] = ("zero_width", "confusable", "markup", "typo")
    text_scope: str = "query"
    local_data: str | None = None
    design: str = "crossed"

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any] | None) -> WrapSettings:
        md = dict(md or {})

        def as_int(key: str, minimum: int) -> int:
            return metadata_int(md, key, getattr(cls, key), minimum, WrapError) or 0

        kinds, rate, scope = text_settings(
            md, cls.text_kinds, cls.text_rate, cls.text_scope, WrapError
        )
        local = md.get("local_data")
        design = str(md.get("design", cls.design)).strip().lower()
        if design not in ("crossed", "nested"):
            raise WrapError(f"unknown design {design!r}; use crossed or nested")
        return cls(
            design=design,
            n_perturbations=as_int("n_perturbations", 1),
            n_examples=as_int("n_examples", 0),
            seed=as_int("seed", 0),
            format_pool=as_int("format_pool", 3),
            text_rate=rate,
            text_kinds=kinds,
            text_scope=scope,
            local_data=str(local) if local not in (None, "") else None,
        )
