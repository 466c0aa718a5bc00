"""The ``lm-eval-robust`` command: one module per subcommand, and the dispatcher here.

Each subcommand lives in ``lm_eval_robust/cli/<name>.py`` with a ``main(argv) -> int``; they
share :mod:`lm_eval_robust.cli.args` (the parser, flag spelling and common values). Commands sit
on top of every other layer (``docs/architecture.md``): nothing outside this package imports it.
"""

from __future__ import annotations

import difflib
import importlib
import sys
import textwrap
from collections.abc import Sequence

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli.args import PROG, spelling_note
from lm_eval_robust.cli.perturb import show_invisible, side_by_side

__all__ = ["COMMANDS", "closest_command", "main", "show_invisible", "side_by_side", "top_help"]

#: subcommand -> (module in this package, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run lm_eval with our model and tasks (every lm_eval run flag)"),
    "perturb": ("perturb", "print a task's clean prompt beside its perturbed variants"),
    "fit": ("fit", "fit a debiasing correction on a task's _train split"),
    "export": ("export", "fold a correction into the output layer: a normal HF checkpoint"),
    "replay": ("replay", "apply corrections to a logged run, without the model"),
    "report": ("report", "robustness tables, paired comparisons and plots of runs"),
    "leaderboard": ("leaderboard", "one row per model over runs of several models"),
    "plan": ("plan", "examples needed before an effect is significant, from a pilot run"),
    "select": ("select", "the paper's target-task filters over a run"),
    "lora": ("lora", "train LoRA baseline adapters on tasks' _train prompts"),
    "wrap": ("wrap", "local data for stock tasks; variant names (<task>_robust_text/_format)"),
}


def top_help() -> str:
    """The text of ``lm-eval-robust --help``."""
    width = max(len(name) for name in COMMANDS)
    rows = [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(
        [
            f"usage: {PROG} <command> [options]",
            "",
            "Robustness of language models to semantically-neutral prompt perturbations, with",
            "debiasing and certificates, as an lm-evaluation-harness plugin.",
            "",
            "commands:",
            *rows,
            "",
            "example:",
            f"  {PROG} run --model debiased_hf --model_args pretrained=gemma-3-270m "
            "--tasks ni065_format_pert",
            "",
            f"Run '{PROG} <command> --help' for a command's flags, defaults and an example.",
            textwrap.fill(spelling_note(), 90),
        ]
    )


def closest_command(word: str) -> str:
    """The subcommand most like ``word`` (always one, however far)."""
    return max(COMMANDS, key=lambda name: difflib.SequenceMatcher(None, word, name).ratio())


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(top_help())
        return 0
    name = args[0]
    try:
        if name not in COMMANDS:
            raise UserError(
                f"unknown command {name!r}; did you mean {closest_command(name)!r}? "
                f"(commands: {', '.join(COMMANDS)}; see {PROG} --help)"
            )
        module = importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")
        return int(module.main(args[1:]))
    except BrokenPipeError:  # e.g. piped into `head`
        sys.stderr.close()
        return 0
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outputs are written whole or not at all: nothing partial is left
        print(
            f"{PROG}: interrupted (Ctrl-C); outputs appear whole or not at all: rerun to finish",
            file=sys.stderr,
        )
        return 130
