"""Pieces of the report's Markdown that its tables and its summary share."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["FIT_LABELS", "FIT_STATS", "markdown_table"]

# fit statistics of an applied correction shown beside the paired metrics
FIT_STATS = ("p_eps_V", "p_eps_L", "p_eps_V_test", "p_eps_L_test")
FIT_LABELS = {
    "p_eps_V": "p_εV (train)",
    "p_eps_L": "p_εL (train)",
    "p_eps_V_test": "p_εV (test)",
    "p_eps_L_test": "p_εL (test)",
}


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
