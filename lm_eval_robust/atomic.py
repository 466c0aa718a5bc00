"""Folders that appear whole or not at all, and outputs that never overwrite their own inputs.

:func:`atomic_dir` yields a temporary folder beside the target; when the block ends normally the
folder takes the target's place in one rename (an existing target is swapped out with
``renameat2(RENAME_EXCHANGE)`` where Linux offers it, else moved aside first, then removed). On an
exception, ``KeyboardInterrupt`` or ``SIGTERM`` the temporary folder is removed and the previous
target is left as it was. A process killed with ``SIGKILL`` cannot clean up after itself: its
temporary folder carries the process id in its name, and the next write to the same target
removes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from lm_eval_robust.errors import UserError

TMP_TAG = ".lmer-tmp-"
OLD_TAG = ".lmer-old-"


class OverwriteError(UserError):
    """An output that would replace or remove one of the command's own inputs."""


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.relative_to(parent)
    except ValueError:
        return False
    return True


def refuse_overwrite(out: str | os.PathLike[str], flag: str, inputs: Iterable[Any]) -> None:
    """Refuse ``out`` when it is one of ``inputs`` or holds one (replacing it would remove it).

    ``inputs`` are ``(name, path)`` pairs; an input that does not exist is ignored.
    """
    target = Path(out).resolve()
    for name, path in inputs:
        if path is None or not str(path):
            continue
        src = Path(str(path))
        if not src.exists():
            continue
        src = src.resolve()
        if target == src or _inside(src, target):
            how = "is" if target == src else "holds"
            raise OverwriteError(
                f"{flag} {out} {how} the {name} {path}: writing it would overwrite the input; "
                f"choose another {flag}"
            )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(target: Path) -> list[Path]:
    """Remove temporary folders of ``target`` left by killed processes; returns them."""
    removed: list[Path] = []
    parent = target.parent
    if not parent.is_dir():
        return removed
    for tag in (TMP_TAG, OLD_TAG):
        for p in parent.glob(f".{target.name}{tag}*"):
            try:
                pid = int(p.name.rsplit(tag, 1)[1].split("-", 1)[0])
            except (ValueError, IndexError):
                continue
            if pid != os.getpid() and not _pid_alive(pid):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the call is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return bool(rc == 0)


def _replace_dir(tmp: Path, target: Path) -> None:
    if not target.exists():
        os.rename(tmp, target)
        return
    if not target.is_dir():
        raise OverwriteError(f"{target} exists and is a file, not a folder; choose another -o")
    if _exchange(tmp, target):  # tmp now holds the previous version
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = target.parent / f".{target.name}{OLD_TAG}{os.getpid()}"
    os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


class _Terminated(BaseException):
    """SIGTERM during an atomic write: unwind so the temporary folder is removed."""


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Terminated(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike[str], what: str = "output") -> Iterator[Path]:
    """Yield a temporary folder that replaces ``target`` as a whole when the block succeeds."""
    dst = Path(target)
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(dst)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}{TMP_TAG}{os.getpid()}-", dir=dst.parent))
    except OSError as exc:
        raise OverwriteError(
            f"cannot write the {what} to {dst} ({exc.strerror or exc}); choose a writable -o"
        ) from None
    try:
        with _sigterm_unwinds():
            yield tmp
            _replace_dir(tmp, dst)
    except _Terminated:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(128 + signal.SIGTERM) from None
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OverwriteError(
            f"cannot write the {what} to {dst} ({exc.strerror or exc}); the previous version is "
            "unchanged; free space or choose another -o"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


class StagedDir:
    """:func:`atomic_dir` for code that learns its target late: ``open`` it, write, ``commit``.

    Used as a context manager around the whole command: an exception before ``commit`` removes
    the temporary folder and leaves the target as it was.
    """

    def __init__(self) -> None:
        self._ctx: contextlib.ExitStack | None = None
        self._tmp: Path | None = None
        self._target: Path | None = None
        self._made: Path | None = None

    def __enter__(self) -> StagedDir:
        self._ctx = contextlib.ExitStack()
        self._ctx.enter_context(_sigterm_unwinds())
        return self

    def open(self, target: Path, what: str, keep_others: bool = True) -> Path:
        """A temporary folder beside ``target``, holding a copy of ``target``'s other files."""
        self._target = target
        missing = target.parent
        while not missing.parent.exists() and missing.parent != missing:
            missing = missing.parent
        self._made = None if missing.exists() else missing  # removed again if nothing lands
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            clean_stale(target)
            prefix = f".{target.name}{TMP_TAG}{os.getpid()}-"
            self._tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
            if keep_others and target.is_dir():  # hard links where possible: no copy cost
                shutil.copytree(target, self._tmp, copy_function=_link_or_copy, dirs_exist_ok=True)
        except OSError as exc:
            raise OverwriteError(
                f"cannot write the {what} to {target} ({exc.strerror or exc}); choose a writable -o"
            ) from None
        return self._tmp

    def commit(self, result: Path) -> Path:
        """Move the folder into place; ``result`` (a path inside it) is returned at its target."""
        assert self._tmp is not None and self._target is not None
        _replace_dir(self._tmp, self._target)
        self._tmp = None
        return self._target / result.relative_to(result.parent)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        tmp, self._tmp = self._tmp, None
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            if self._made is not None and self._target is not None:
                with contextlib.suppress(OSError):  # only folders left empty
                    d = self._target.parent
                    while True:
                        d.rmdir()
                        if d == self._made:
                            break
                        d = d.parent
        if self._ctx is not None:
            self._ctx.close()
        if exc_type is _Terminated:
            raise SystemExit(128 + signal.SIGTERM) from None
