"""What every subcommand shares: its parser, flag spelling, and the parsing of common values.

Flags are spelt as the harness spells them, with underscores (``--model_args``,
``--batch_size``); every multi-word flag is also accepted with dashes (``--model-args``).
Each parser's ``--help`` shows the defaults and one example command.
"""

from __future__ import annotations

import argparse
import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

from lm_eval_robust.base.errors import OneLineArgumentParser, UserError
from lm_eval_robust.base.validate import (
    CONFIDENCE_MAX,
    CONFIDENCE_MIN,
    RESAMPLES_MAX,
    RESAMPLES_MIN,
    SEED_MAX,
    check_confidence,
    check_resamples,
    check_seed,
)

__all__ = [
    "CONFIDENCE_MAX",
    "CONFIDENCE_MIN",
    "PROG",
    "RESAMPLES_MAX",
    "RESAMPLES_MIN",
    "SEED_MAX",
    "CommandParser",
    "HelpFormatter",
    "add_model_flags",
    "check_bootstrap_flags",
    "check_confidence",
    "check_resamples",
    "check_seed",
    "known_tasks",
    "model_kwargs",
    "normalise_flags",
    "number_or_auto",
    "parse_metadata",
    "perturbed_task",
    "positive_int",
    "spelling_note",
]

PROG = "lm-eval-robust"


def spelling_note() -> str:
    """The line every help text ends with."""
    return (
        "Multi-word flags are spelt with underscores, as lm_eval spells them (--model_args); "
        "the dash spelling (--model-args) is accepted too."
    )


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows each flag's default (where it has one) and keeps the example as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        shown = default not in (None, False, argparse.SUPPRESS) and default != ""
        if shown and "%(default)" not in text and (action.option_strings or action.nargs == "?"):
            text += " (default: %(default)s)"
        return text


def _wrap(text: str, width: int = 90) -> str:
    return "\n".join(textwrap.fill(p, width) for p in text.split("\n"))


def normalise_flags(argv: Sequence[str], known: Iterable[str]) -> list[str]:
    """``--a-b`` becomes ``--a_b`` (or the other way) when only that spelling is a flag."""
    flags = set(known)
    out: list[str] = []
    rest = False
    for token in argv:
        if rest or not token.startswith("--") or token == "--":
            rest = rest or token == "--"
            out.append(token)
            continue
        name, eq, value = token.partition("=")
        if name not in flags:
            for other in ("--" + name[2:].replace("-", "_"), "--" + name[2:].replace("_", "-")):
                if other in flags:
                    name = other
                    break
        out.append(name + eq + value)
    return out


class CommandParser(OneLineArgumentParser):
    """The parser of one subcommand: ``lm-eval-robust NAME``, defaults and an example in --help.

    Errors are one line (:class:`OneLineArgumentParser`); ``--a-b`` is read as ``--a_b``.
    """

    def __init__(self, name: str, description: str, example: str) -> None:
        super().__init__(
            prog=f"{PROG} {name}",
            description=_wrap(description),
            epilog=f"example:\n  {example}\n\n{_wrap(spelling_note())}",
            formatter_class=HelpFormatter,
        )

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if args is not None:
            args = normalise_flags(args, self._option_string_actions)
        return super().parse_known_args(args, namespace)


def add_model_flags(p: argparse.ArgumentParser, *, batch_size: str) -> None:
    """``--pretrained``, ``--model_args``, ``--metadata`` and ``--batch_size``, spelt alike."""
    p.add_argument("--pretrained", default="gemma-3-270m", help="model folder, hub id or alias")
    p.add_argument(
        "--model_args", default="", help="more debiased_hf model args, k=v,k=v (e.g. dtype=...)"
    )
    p.add_argument("--metadata", default="{}", help="task settings as JSON, as for lm_eval")
    p.add_argument("--batch_size", default=batch_size, help="prompts per forward pass")


def number_or_auto(flag: str, value: str, *, minimum: float | None = None) -> float | None:
    """A number (at least ``minimum``), or None for ``auto``; a one-line error otherwise."""
    if value == "auto":
        return None
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or (minimum is not None and x < minimum):
        bound = f" >= {minimum:g}" if minimum is not None else ""
        raise UserError(f"{flag} must be a number{bound} or 'auto', got {value!r}")
    return x


def positive_int(flag: str, value: object) -> int:
    """``value`` as an integer >= 1, or a one-line error naming ``flag``."""
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"{flag} must be an integer >= 1, got {value!r}")
    return int(text)


def parse_metadata(text: str) -> dict[str, Any]:
    """``--metadata``: a JSON object, as for lm_eval."""
    import json

    try:
        md = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"--metadata must be JSON, e.g. '{{\"n_perturbations\": 20}}' ({exc})"
        ) from None
    if not isinstance(md, dict):
        raise UserError("--metadata must be a JSON object, e.g. '{\"n_perturbations\": 20}'")
    return dict(md)


def model_kwargs(text: str) -> dict[str, Any]:
    """``--model_args k=v,k=v``, with a device (the harness needs one when called from Python)."""
    extra: dict[str, Any] = {}
    for kv in text.split(","):
        if not kv.strip():
            continue
        key, eq, value = kv.partition("=")
        if not eq or not key.strip():
            raise UserError(f"--model_args takes k=v,k=v; {kv.strip()!r} has no '='")
        extra[key.strip()] = value
    if "device" not in extra:
        import torch

        extra["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    return extra


_PERT = re.compile(r"^(?P<base>[^_]+)(?:_(?P<rest>.*))?$")


def perturbed_task(name: str, flag: str = "--task") -> str:
    """The task key (``ni065_format_pert``) of a perturbed NI task the user named, or one line.

    Accepts the test name and its ``_train`` / ``_holdout`` splits, and the task's aliases
    (``065_format_pert``); anything else is refused naming what was typed and the valid spelling.
    """
    from lm_eval_robust.tasks.specs import TASK_ORDER, get_spec

    typed = name.strip()
    m = _PERT.match(typed)
    base = m.group("base") if m else typed
    try:
        short = get_spec(base).short
    except UserError:
        raise UserError(
            f"unknown task {typed!r} for {flag}; use <task>_format_pert or <task>_text_pert "
            f"with a task of {', '.join(TASK_ORDER)}"
        ) from None
    rest = (m.group("rest") if m else None) or ""
    for suffix in ("_train", "_holdout"):
        rest = rest.removesuffix(suffix)
    if rest in ("format_pert", "text_pert"):
        return f"{short}_{rest}"
    kinds = [k for k in ("format", "text") if k in rest] or ["format", "text"]
    spelled = " or ".join(f"{short}_{k}_pert" for k in kinds)
    what = "is a clean task" if not rest else "is not a task"
    raise UserError(f"{flag} {typed} {what}; use {spelled} (a perturbed task)")


def known_tasks() -> set[str]:
    """Every task, tag and group name of our YAMLs (read from the files; no harness loaded)."""
    from pathlib import Path

    from lm_eval_robust.harness._plugin import task_dir

    names: set[str] = set()
    for path in Path(task_dir()).glob("*.yaml"):
        for line in path.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key in ("task", "tag", "group") and value.strip():
                names.add(value.strip())
    return names


def check_bootstrap_flags(resamples: int, confidence: float, seed: int = 0) -> None:
    """``--resamples``, ``--confidence`` and ``--seed`` of a command that bootstraps."""
    check_resamples(resamples)
    check_confidence(confidence)
    check_seed(seed)
