"""Parsing of the ``--metadata`` settings that every task family shares (NI and generation).

Each parser raises the caller's :class:`UserError` subclass with one line naming the setting, the
value given and a working example.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lm_eval_robust.errors import UserError
from lm_eval_robust.perturb.text import TEXT_PERTURBATIONS


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
