#!/usr/bin/env python3
"""Run every ```bash block of README.md and docs/*.md, in document order, as a user would.

Each block's commands run one by one with ``bash -c`` in one scratch folder (so a later block
reads what an earlier one wrote), with ``LM_EVAL_ROBUST_DATA_DIR`` set to the data folder,
``HF_HUB_OFFLINE=1``, and ``results`` linked to the repository's committed runs. The script prints
one line per command, ``PASS``, ``FAIL`` or ``SKIP(reason)`` with its wall time, and exits 1 if
any command failed.

**How a block says how it runs.** An HTML comment right before the fence (blank lines between
are allowed), invisible on the rendered page::

    <!-- docs-run
    args 1: --limit 140
    timeout 2: 900
    skip 3: needs a GPU
    -->

* ``args N: EXTRA`` appends ``EXTRA`` to command ``N`` of the block (1-based, counted over the
  block's commands after joining ``\\`` continuations and dropping comments): the small setting
  it runs on here instead of its full size (a later ``--metadata`` replaces an earlier one);
* ``timeout N: SECONDS`` overrides ``--timeout`` for command ``N``;
* ``skip: REASON`` skips the whole block, ``skip N: REASON`` command ``N``; a reason is required,
  and every skipped command is printed with it (nothing is skipped silently).

A block without a comment runs as written. ``tests/test_docs_commands.py`` checks statically that
every block parses, that every subcommand, flag, task name and ``--metadata`` key exists, and
that every directive is well formed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: documents in the order a reader meets them (the README links the docs in this order); any
#: other page under docs/ follows, sorted by name
DOC_ORDER = (
    "README.md",
    "docs/method-and-metrics.md",
    "docs/tasks-and-settings.md",
    "docs/commands.md",
    "docs/engines.md",
    "docs/results-guide.md",
)

#: shell operators that separate simple commands on one logical line
OPERATORS = frozenset({"&&", "||", ";", "|", "&"})

_FENCE_OPEN = re.compile(r"^(?P<indent>\s*)```bash\s*$")
_FENCE_CLOSE = re.compile(r"^\s*```\s*$")
_DIRECTIVE_OPEN = re.compile(r"^\s*<!--\s*docs-run\b(?P<rest>.*)$")
_DIRECTIVE_LINE = re.compile(r"^(?P<kind>args|timeout|skip)(?:\s+(?P<n>\d+))?\s*:\s*(?P<value>.*)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class DocsError(ValueError):
    """A block or directive that cannot be read; the message names the file and line."""


@dataclass
class Command:
    """One logical command line of a block."""

    source: str  # "docs/commands.md:123": where the command starts
    text: str  # as written (continuations joined, comments dropped)
    extra: str = ""  # appended when run here (``args N:``)
    skip: str | None = None  # reason it does not run here
    timeout: float | None = None

    @property
    def run_text(self) -> str:
        return f"{self.text} {self.extra}" if self.extra else self.text


@dataclass
class Block:
    """One ```bash block and its directive."""

    source: str
    commands: list[Command] = field(default_factory=list)


def strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` inside quotes or a word is kept)."""
    quote = ""
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def logical_lines(lines: Sequence[str], first_line: int) -> Iterator[tuple[int, str]]:
    """(line number, command) for each command of a block: ``\\`` continuations joined."""
    parts: list[str] = []
    start = first_line
    for offset, raw in enumerate(lines):
        line = strip_comment(raw)
        if not parts:
            start = first_line + offset
            if not line.strip():
                continue
        if line.endswith("\\"):
            parts.append(line[:-1].strip())
            continue
        parts.append(line.strip())
        yield start, " ".join(p for p in parts if p)
        parts = []
    if parts:
        raise DocsError(f"line {start}: the block ends inside a '\\' continuation")


def simple_commands(text: str) -> list[list[str]]:
    """The simple commands of a logical line, as argv lists (leading ``VAR=value`` dropped)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        tokens = list(lex)
    except ValueError as exc:
        raise DocsError(f"cannot split {text!r}: {exc}") from None
    out: list[list[str]] = [[]]
    for token in tokens:
        if token in OPERATORS:
            out.append([])
        else:
            out[-1].append(token)
    cleaned = []
    for argv in out:
        while argv and _ASSIGNMENT.match(argv[0]):
            argv = argv[1:]
        if argv:
            cleaned.append(argv)
    return cleaned


def _parse_directive(body: list[str], where: str) -> list[tuple[str, int | None, str]]:
    out: list[tuple[str, int | None, str]] = []
    for line in body:
        line = line.strip()
        if not line:
            continue
        m = _DIRECTIVE_LINE.match(line)
        if not m:
            raise DocsError(
                f"{where}: cannot read docs-run line {line!r} (use 'args N: ...', "
                "'timeout N: SECONDS', 'skip: REASON' or 'skip N: REASON')"
            )
        kind, n, value = m.group("kind"), m.group("n"), m.group("value").strip()
        if not value:
            raise DocsError(f"{where}: '{kind}' needs a value (a skip needs its reason)")
        if kind in ("args", "timeout") and n is None:
            raise DocsError(f"{where}: '{kind}' needs the command's number, e.g. '{kind} 1: ...'")
        if kind == "timeout":
            try:
                float(value)
            except ValueError:
                raise DocsError(f"{where}: timeout {value!r} is no number of seconds") from None
        out.append((kind, int(n) if n is not None else None, value))
    return out


def read_blocks(path: Path, name: str) -> list[Block]:
    """The ```bash blocks of one document, with their directives applied."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: list[tuple[str, int | None, str]] | None = None
    pending_where = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        d = _DIRECTIVE_OPEN.match(line)
        if d:
            where = f"{name}:{i + 1}"
            body = [d.group("rest")]
            while "-->" not in body[-1]:
                i += 1
                if i == len(lines):
                    raise DocsError(f"{where}: docs-run comment is never closed")
                body.append(lines[i])
            body[-1] = body[-1].split("-->", 1)[0]
            pending, pending_where = _parse_directive(body, where), where
            i += 1
            continue
        m = _FENCE_OPEN.match(line)
        if m:
            indent = len(m.group("indent"))
            start = i + 1
            body_lines: list[str] = []
            i += 1
            while i < len(lines) and not _FENCE_CLOSE.match(lines[i]):
                body_lines.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
                i += 1
            if i == len(lines):
                raise DocsError(f"{name}:{start}: ```bash block is never closed")
            block = Block(source=f"{name}:{start}")
            for lineno, text in logical_lines(body_lines, start + 1):
                block.commands.append(Command(source=f"{name}:{lineno}", text=text))
            if not block.commands:
                raise DocsError(f"{block.source}: empty ```bash block")
            _apply(block, pending or [], pending_where)
            blocks.append(block)
            pending = None
            i += 1
            continue
        if pending is not None and line.strip():
            raise DocsError(f"{pending_where}: docs-run comment is not followed by a ```bash block")
        i += 1
    if pending is not None:
        raise DocsError(f"{pending_where}: docs-run comment is not followed by a ```bash block")
    return blocks


def _apply(block: Block, directive: list[tuple[str, int | None, str]], where: str) -> None:
    for kind, n, value in directive:
        if n is not None and not 1 <= n <= len(block.commands):
            raise DocsError(
                f"{where}: '{kind} {n}' but the block has {len(block.commands)} command(s)"
            )
        targets = block.commands if n is None else [block.commands[n - 1]]
        for cmd in targets:
            if kind == "args":
                cmd.extra = f"{cmd.extra} {value}".strip()
            elif kind == "timeout":
                cmd.timeout = float(value)
            else:
                cmd.skip = value


def documents(repo: Path = REPO) -> list[tuple[Path, str]]:
    """(path, name) of README.md and every docs/*.md, in reading order."""
    names = [n for n in DOC_ORDER if (repo / n).is_file()]
    rest = sorted(
        p.relative_to(repo).as_posix()
        for p in (repo / "docs").glob("*.md")
        if p.relative_to(repo).as_posix() not in names
    )
    return [(repo / n, n) for n in [*names, *rest]]


def collect(repo: Path = REPO) -> list[Block]:
    """Every ```bash block of the documents, in order."""
    return [b for path, name in documents(repo) for b in read_blocks(path, name)]


# ---------------------------------------------------------------------------------------------
# running


def environment(data_dir: Path) -> dict[str, str]:
    """What a user's shell would have: this interpreter's scripts first on PATH, the data dir."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["LM_EVAL_ROBUST_DATA_DIR"] = str(data_dir)
    env["HF_HUB_OFFLINE"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _short(text: str, width: int = 110) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def run_command(
    cmd: Command, workdir: Path, env: dict[str, str], timeout: float, log: Path
) -> tuple[str, float]:
    """Run one command; ('PASS' | 'FAIL(...)', wall seconds). Output goes to ``log``."""
    t0 = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        out.write(f"$ {cmd.run_text}\n")
        out.flush()
        try:
            proc = subprocess.run(
                ["bash", "-c", cmd.run_text],
                cwd=workdir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=cmd.timeout or timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"FAIL(timeout {cmd.timeout or timeout:.0f}s)", time.monotonic() - t0
    status = "PASS" if proc.returncode == 0 else f"FAIL(exit {proc.returncode})"
    return status, time.monotonic() - t0


def _tail(path: Path, n: int = 12) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join("      | " + line for line in lines[-n:])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/run_docs.py",
        description="Run every ```bash block of README.md and docs/*.md in document order.",
    )
    p.add_argument(
        "--data-dir",
        default="../shared/data",
        help="data folder for LM_EVAL_ROBUST_DATA_DIR, relative to the repo root "
        "(default: %(default)s)",
    )
    p.add_argument("--workdir", default=None, help="scratch folder (default: a new temp folder)")
    p.add_argument(
        "--only",
        default=None,
        help="run only commands whose 'file:line command' matches this regular expression",
    )
    p.add_argument("--list", action="store_true", help="show the blocks and exit")
    p.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per command")
    args = p.parse_args(argv)

    try:
        blocks = collect()
    except DocsError as exc:
        print(f"run_docs: {exc}", file=sys.stderr)
        return 2
    only = re.compile(args.only) if args.only else None

    def selected(cmd: Command) -> bool:
        return only is None or bool(only.search(f"{cmd.source} {cmd.run_text}"))

    if args.list:
        for block in blocks:
            print(f"{block.source}")
            for i, cmd in enumerate(block.commands, 1):
                mark = "" if selected(cmd) else "  (not selected by --only)"
                print(f"  {i}. {cmd.text}{mark}")
                if cmd.extra:
                    print(f"     + {cmd.extra}")
                if cmd.timeout:
                    print(f"     timeout {cmd.timeout:.0f}s")
                if cmd.skip:
                    print(f"     SKIP({cmd.skip})")
        return 0

    data_dir = (REPO / args.data_dir).resolve()
    if not args.dry_run and not data_dir.is_dir():
        print(f"run_docs: data folder {data_dir} does not exist (--data-dir)", file=sys.stderr)
        return 2
    if args.workdir:
        workdir = Path(args.workdir).resolve()
    elif args.dry_run:
        workdir = Path(tempfile.gettempdir()) / "run_docs_<new>"
    else:
        workdir = Path(tempfile.mkdtemp(prefix="run_docs_")).resolve()
    env = environment(data_dir)
    if not args.dry_run:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "_logs").mkdir(exist_ok=True)
        if not (workdir / "results").exists():
            (workdir / "results").symlink_to(REPO / "results")
    print(f"# workdir {workdir}; LM_EVAL_ROBUST_DATA_DIR={data_dir}; HF_HUB_OFFLINE=1", flush=True)

    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    unselected = 0
    n = 0
    for block in blocks:
        for cmd in block.commands:
            if not selected(cmd):
                unselected += 1
                continue
            n += 1
            label = f"{cmd.source:<28} {_short(cmd.run_text)}"
            if cmd.skip:
                counts["SKIP"] += 1
                print(f"SKIP({cmd.skip})      {label}", flush=True)
                continue
            if args.dry_run:
                print(f"RUN        {label}", flush=True)
                continue
            log = workdir / "_logs" / f"{n:03d}.log"
            status, wall = run_command(cmd, workdir, env, args.timeout, log)
            counts["PASS" if status == "PASS" else "FAIL"] += 1
            print(f"{status:<10} {wall:7.1f}s  {label}", flush=True)
            if status != "PASS":
                print(f"      log: {log}\n{_tail(log)}", flush=True)
    note = f", {unselected} not selected by --only" if unselected else ""
    print(f"# {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped{note}")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
