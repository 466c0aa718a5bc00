"""``lm-eval-robust run``: the harness's ``lm_eval run``, with our model and tasks registered."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli.args import PROG, normalise_flags, spelling_note

__all__ = ["EXAMPLE", "harness_run_parser", "main", "unknown_tasks_message"]

EXAMPLE = (
    f"{PROG} run --model debiased_hf --model_args pretrained=gemma-3-270m "
    "--tasks ni065_format_pert --output_path runs/base --log_samples"
)
USAGE = f"{PROG} run --model <model> --tasks <task>[,<task>] --model_args <k=v,k=v> [options]"


def _harness_defaults() -> dict[str, Any]:
    """The harness's own defaults (its parser leaves them None and fills them in later)."""
    from lm_eval.config.evaluate_config import EvaluatorConfig

    out: dict[str, Any] = {}
    for f in dataclasses.fields(EvaluatorConfig):
        if f.default is not dataclasses.MISSING and f.default not in (None, False, ""):
            out[f.name] = f.default
    return out


def harness_run_parser(harness: Any) -> argparse.ArgumentParser:
    """The harness's ``run`` parser, renamed to ``lm-eval-robust run``, with defaults and example.

    ``harness`` is a ``lm_eval._cli.HarnessCLI``; its ``run`` subparser is changed in place.
    """
    run: argparse.ArgumentParser = harness._subparsers.choices["run"]
    run.prog = f"{PROG} run"
    run.usage = USAGE
    run.description = textwrap.fill(
        "Run lm_eval with the lm-eval-robust plugin: every flag of lm_eval run, plus the "
        "debiased_hf model and our tasks.",
        90,
    )
    run.epilog = f"example:\n  {EXAMPLE}\n\n{textwrap.fill(spelling_note(), 90)}"
    defaults = _harness_defaults()
    for action in run._actions:
        if action.dest in defaults and action.help and "default:" not in action.help:
            action.help += f" (default: {defaults[action.dest]})"
    return run


def main(argv: Sequence[str]) -> int:
    """Run the harness's ``run`` on ``argv`` (flags as ``lm_eval run`` takes them)."""
    from lm_eval._cli import HarnessCLI
    from lm_eval.utils import setup_logging

    from lm_eval_robust.harness._plugin import register

    register()
    setup_logging()
    harness = HarnessCLI()
    run = harness_run_parser(harness)
    args = normalise_flags(argv, run._option_string_actions)
    if not args or args[0] in ("-h", "--help"):
        run.print_help()
        return 0
    sys.argv = ["lm_eval", "run", *args]
    try:
        harness.execute(harness.parse_args())
    except ValueError as exc:
        missing = str(exc).removeprefix("Tasks not found: ")
        if missing == str(exc):
            raise
        raise UserError(unknown_tasks_message(missing)) from None
    return 0


def unknown_tasks_message(missing: str) -> str:
    """The one line for ``--tasks`` names the harness did not find, with the nearest of ours."""
    from lm_eval_robust.base.validate import nearest
    from lm_eval_robust.cli.args import known_tasks

    names = [m.strip() for m in missing.split(",") if m.strip()]
    hints = []
    for name in names:
        near = nearest(name, known_tasks())
        if near:
            hints.append(f"did you mean {near!r} for {name!r}?")
    hint = " ".join(hints) or "see `lm-eval ls tasks` for the harness's tasks"
    return (
        f"unknown task(s) in --tasks: {', '.join(names)}; {hint} (ours: ni_format_pert, "
        "ni_text_pert, ni065_format_pert, ...)"
    )
