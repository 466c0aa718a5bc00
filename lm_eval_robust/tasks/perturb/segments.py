"""Prompts as sequences of segments, so perturbations know what they must not touch."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Segment:
    """A piece of a prompt.

    ``protected`` segments (label words, option markers, the answer cue) are never changed by a
    text perturbation: changing them could change what the right answer is. ``role`` names what
    the piece is (``definition``, ``demo``, ``query``, ``marker``, ``cue``, ``label``, ``format``)
    so a perturbation scope can select, e.g., only the query.
    """

    text: str
    protected: bool = False
    role: str = "text"


def join(segments: Iterable[Segment]) -> str:
    """The prompt text of a segment sequence."""
    return "".join(s.text for s in segments)
