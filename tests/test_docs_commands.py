"""Every command in README.md and docs/*.md, checked statically (no model runs, seconds).

``scripts/run_docs.py`` runs the same commands for real; this test checks that each ```bash
block parses into commands, that every ``lm-eval-robust`` subcommand exists and its parser
accepts the flags used, that ``lm_eval`` accepts its flags, that every task named with
``--tasks``/``--task`` is one of ours, that every ``--metadata`` key is a setting and every
``--model_args`` key a ``debiased_hf`` model arg. Commands are checked as written and as the
script runs them (with the small-setting args of their ``docs-run`` comment).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli import COMMANDS
from lm_eval_robust.cli.args import known_tasks, normalise_flags
from lm_eval_robust.tasks.settings import task_setting_names
from lm_eval_robust.tasks.wrap.names import parse as parse_variant

REPO = Path(__file__).resolve().parent.parent


def _load_run_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_docs", REPO / "scripts" / "run_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_docs"] = module
    spec.loader.exec_module(module)
    return module


run_docs = _load_run_docs()


@cache
def _blocks() -> list[Any]:
    return list(run_docs.collect(REPO))


def _argvs() -> Iterator[tuple[str, str, list[str]]]:
    """(where, program, args) of every lm_eval / lm-eval-robust invocation, as written and run."""
    for block in _blocks():
        for cmd in block.commands:
            texts = {cmd.text: "", cmd.run_text: " (as run here)"}
            for text, note in texts.items():
                for argv in run_docs.simple_commands(text):
                    where = f"{cmd.source}{note}: {' '.join(argv)}"
                    if "-m" in argv and argv.index("-m") + 1 < len(argv):
                        i = argv.index("-m")
                        if argv[i + 1] == "lm_eval":  # torchrun / accelerate launch -m lm_eval
                            yield where, "lm_eval", argv[i + 2 :]
                            continue
                    if argv[0] in ("lm_eval", "lm-eval-robust"):
                        yield where, argv[0], argv[1:]


@cache
def _harness_parser() -> Any:
    from lm_eval._cli import HarnessCLI

    from lm_eval_robust.cli.run import harness_run_parser

    return harness_run_parser(HarnessCLI())


def _parser(program: str, args: list[str]) -> tuple[Any, list[str]]:
    """The parser of an invocation and the args it parses (``lm-eval-robust SUB`` dropped)."""
    if program == "lm_eval":
        return _harness_parser(), args[1:] if args[:1] == ["run"] else args
    sub = args[0]
    if sub == "run":
        return _harness_parser(), args[1:]
    module = importlib.import_module(f"lm_eval_robust.cli.{COMMANDS[sub][0]}")
    return module.build_parser(), args[1:]


def _flags(args: list[str]) -> Iterator[str]:
    for token in args:
        if token.startswith("-") and len(token) > 1 and not token[1:2].isdigit():
            yield token.split("=", 1)[0]


def _values(args: list[str], *flags: str) -> Iterator[str]:
    for i, token in enumerate(args):
        name, eq, value = token.partition("=")
        if name in flags:
            if eq:
                yield value
            elif i + 1 < len(args):
                yield args[i + 1]


def test_blocks_parse_into_commands() -> None:
    blocks = _blocks()
    assert blocks, "no ```bash block found in README.md and docs/"
    names = {b.source.split(":")[0] for b in blocks}
    assert "README.md" in names
    for block in blocks:
        for cmd in block.commands:
            assert run_docs.simple_commands(cmd.run_text), cmd.source
            if cmd.skip is not None:
                assert cmd.skip.strip(), f"{cmd.source}: a skip needs its reason"


def test_directive_errors_are_reported(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("<!-- docs-run\nargs 3: --limit 1\n-->\n```bash\nlm_eval --help\n```\n")
    with pytest.raises(run_docs.DocsError, match="has 1 command"):
        run_docs.read_blocks(doc, "x.md")
    doc.write_text("<!-- docs-run\nskip:\n-->\n```bash\nlm_eval --help\n```\n")
    with pytest.raises(run_docs.DocsError, match="reason"):
        run_docs.read_blocks(doc, "x.md")
    doc.write_text("<!-- docs-run\nskip: needs a GPU\n-->\n\ntext\n```bash\nls\n```\n")
    with pytest.raises(run_docs.DocsError, match="not followed"):
        run_docs.read_blocks(doc, "x.md")


def test_continuations_and_comments() -> None:
    lines = ["# a comment", "lm_eval --model hf \\", "   --tasks 'a #b'   # trailing", ""]
    assert list(run_docs.logical_lines(lines, 10)) == [(11, "lm_eval --model hf --tasks 'a #b'")]
    assert run_docs.simple_commands("A=1 pip install x && pytest -q") == [
        ["pip", "install", "x"],
        ["pytest", "-q"],
    ]


def test_subcommands_and_flags_exist() -> None:
    errors: list[str] = []
    seen = 0
    for where, program, args in _argvs():
        seen += 1
        if program == "lm-eval-robust" and (not args or args[0] not in COMMANDS):
            errors.append(f"{where}: no such subcommand")
            continue
        parser, rest = _parser(program, args)
        if "-h" in rest or "--help" in rest:
            continue
        known = parser._option_string_actions
        for flag in _flags(normalise_flags(rest, known)):
            if flag not in known:
                errors.append(f"{where}: {flag} is not a flag of {parser.prog}")
        try:
            with contextlib.redirect_stderr(io.StringIO()) as err:
                parser.parse_args(rest)
        except (SystemExit, UserError) as exc:
            errors.append(f"{where}: refused by {parser.prog}: {exc} {err.getvalue().strip()}")
    assert seen > 10
    assert not errors, "\n".join(errors)


def test_task_names_exist() -> None:
    tasks = known_tasks()
    errors = []
    for where, _program, args in _argvs():
        for value in _values(args, "--tasks", "--task"):
            if value.endswith(".json"):
                continue  # select's targets file
            for name in value.split(","):
                # <task>_robust_text / _robust_format: a variant of a stock task, resolved by
                # lm-eval's TaskManager at run time (lm_eval_robust.tasks.wrap)
                if name.strip() not in tasks and parse_variant(name.strip()) is None:
                    errors.append(f"{name!r} is not a task or tag ({where})")
    assert not errors, "\n".join(errors)


def test_metadata_keys_are_settings() -> None:
    settings = task_setting_names()
    errors = []
    for where, _program, args in _argvs():
        for value in _values(args, "--metadata"):
            try:
                md = json.loads(value)
            except json.JSONDecodeError as exc:
                errors.append(f"{where}: --metadata is not JSON ({exc})")
                continue
            errors += [f"{where}: {k!r} is not a setting" for k in md if k not in settings]
    assert not errors, "\n".join(errors)


def test_model_args_are_known() -> None:
    from lm_eval_robust.base.validate import model_arg_names

    names = model_arg_names()
    errors = []
    for where, program, args in _argvs():
        if program == "lm_eval" or args[:1] == ["run"]:
            if set(_values(args, "--model")) & {"vllm", "debiased_vllm"}:
                continue  # vLLM's engine args (docs/engines.md, "vLLM")
            for value in _values(args, "--model_args"):
                for kv in value.split(","):
                    key = kv.partition("=")[0].strip()
                    if key and key not in names:
                        errors.append(f"{where}: {key!r} is not a debiased_hf model arg")
    assert not errors, "\n".join(errors)


def test_output_paths_do_not_collide() -> None:
    """The docs run in one scratch folder, in order: two runs of one model into one
    ``--output_path`` leave two results files in its folder, which ``leaderboard`` and ``report``
    refuse to guess between. Each documented run writes a folder of its own."""
    seen: dict[tuple[str, str], str] = {}
    errors = []
    for block in _blocks():
        for cmd in block.commands:
            for argv in run_docs.simple_commands(cmd.run_text):
                args = argv[1:] if argv[0] == "lm_eval" else []
                for out in _values(args, "--output_path"):
                    pretrained = next(
                        (
                            kv.split("=", 1)[1]
                            for ma in _values(args, "--model_args")
                            for kv in ma.split(",")
                            if kv.startswith("pretrained=")
                        ),
                        "",
                    )
                    first = seen.setdefault((out.rstrip("/"), pretrained), cmd.source)
                    if first != cmd.source:
                        errors.append(
                            f"{cmd.source}: --output_path {out} for {pretrained} "
                            f"is also written by {first}"
                        )
    assert not errors, "\n".join(errors)
