"""Names of the perturbed variants of a task lm-eval knows.

``<task>_robust_text`` / ``<task>_robust_format`` score every doc of the task's evaluation split;
``_train``, ``_test`` and ``_holdout`` after them keep the 50/35/15 example split of the paper's
protocol (a correction is fitted on train and judged on test; formats of the three are disjoint).

The suffix is not ``_text_pert``: this package's own generation tasks already use
``gsm8k_text_pert``, ``nq_open_text_pert``, ..., and a variant of the stock ``gsm8k`` must not be
shadowed by them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KINDS = ("text", "format")
SPLITS = ("all", "train", "test", "holdout")

SUFFIX = "_robust_"
_NAME = re.compile(
    r"^(?P<base>.+)_robust_(?P<kind>text|format)(?:_(?P<split>train|test|holdout))?$"
)


@dataclass(frozen=True)
class VariantName:
    """A parsed variant name: the wrapped task, the perturbation kind and the example split."""

    name: str
    base: str
    kind: str
    split: str

    @property
    def format_split(self) -> str:
        """The format set this variant draws from (the whole eval split uses the test formats)."""
        return "test" if self.split == "all" else self.split


def parse(name: str) -> VariantName | None:
    """``VariantName`` of ``name``, or None when it is not a variant name."""
    m = _NAME.match(name)
    if m is None:
        return None
    return VariantName(name, m.group("base"), m.group("kind"), m.group("split") or "all")


def variant_names(base: str, kinds: tuple[str, ...] = KINDS, split: str = "all") -> list[str]:
    """The variant names of ``base`` (``split`` "all" gives the names without a split suffix)."""
    tail = "" if split == "all" else f"_{split}"
    return [f"{base}{SUFFIX}{kind}{tail}" for kind in kinds]
