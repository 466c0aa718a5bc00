"""The one home of atomic writes, and of the rule that an output never touches its own inputs.

Every command that writes goes through :func:`refuse_overwrite` first: an output may not be,
hold, or sit inside any input the command reads (runs, results and samples files, corrections,
features, model folders). Files appear whole through :func:`write_file` (temporary file, fsync,
``os.replace``); folders through :func:`atomic_dir` / :class:`StagedDir`, and an existing output
folder is replaced whole, nothing of the previous version left beside the new files
(:func:`check_replaceable` refuses a folder that holds files the command does not write).

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
import fnmatch
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from lm_eval_robust.base.errors import UserError

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
    """Refuse ``out`` when it is one of ``inputs``, holds one, or sits inside an input folder.

    ``inputs`` are ``(name, path)`` pairs; an input that does not exist is ignored. Writing
    ``out`` would replace, remove or add to that input (a second results file in a run folder,
    a report inside a model folder).
    """
    target = Path(out).resolve()
    found: list[tuple[int, str, Any]] = []
    for name, path in inputs:
        if path is None or not str(path):
            continue
        src = Path(str(path))
        if not src.exists():
            continue
        src = src.resolve()
        if target == src:
            found.append((0, name, path))
        elif _inside(src, target):
            found.append((1, name, path))
        elif src.is_dir() and _inside(target, src):
            found.append((2, name, path))
    if found:  # the closest relation names the input: "is" before "holds" before "is inside"
        rank, name, path = min(found, key=lambda f: f[0])
        how = ("is", "holds", "is inside")[rank]
        shown = str(out) or "''"
        raise OverwriteError(
            f"{flag} {shown} {how} the {name} {path}: writing it would change that input; "
            f"choose another {flag} outside it"
        )


def run_inputs(runs: Iterable[str | os.PathLike[str]]) -> list[tuple[str, Path]]:
    """The ``(name, folder)`` inputs of lm_eval runs given as ``--output_path`` folders, model
    folders or results files: every folder that holds a ``results_*.json`` the run is read from
    (a report beside the model folder, ``OUT/report``, sits outside them)."""
    out: list[tuple[str, Path]] = []
    for r in runs:
        p = Path(r)
        if p.is_file():
            out.append(("run", p.parent))
        elif any(p.glob("results_*.json")):
            out.append(("run", p))
        else:
            found = sorted({f.parent for f in p.glob("*/results_*.json")})
            out += [("run", f) for f in found] or [("run", p)]
    return out


def check_replaceable(
    target: str | os.PathLike[str], flag: str, what: str, patterns: Sequence[str]
) -> None:
    """An existing ``target`` folder may be replaced whole only when every file in it is one
    this command writes (``patterns``, fnmatch): a folder of other files is refused, not
    emptied."""
    p = Path(target)
    if not p.exists():
        return
    if not p.is_dir():
        raise OverwriteError(f"{flag} {target} is a file, not a folder; choose another {flag}")
    foreign = sorted(
        x.name
        for x in p.iterdir()
        if not (x.is_file() and any(fnmatch.fnmatch(x.name, pat) for pat in patterns))
    )
    if foreign:
        shown = ", ".join(foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        raise OverwriteError(
            f"{flag} {str(target) or repr('')} holds {shown}, not written by {what}; the folder "
            f"is replaced whole, so choose a new or empty {flag}"
        )


def write_file(
    data: bytes,
    target: str | os.PathLike[str],
    what: str = "output",
    error: type[UserError] = OverwriteError,
) -> Path:
    """Write ``data`` to ``target`` atomically (temporary file, fsync, ``os.replace``).

    On any failure the temporary file is removed and an existing target is left untouched; a
    folder that cannot be written is a one-line ``error`` naming ``what`` was being written.
    """
    target = Path(target)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            raise IsADirectoryError(21, "it is a folder")
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise error(
            f"cannot write {what} to {target} ({exc.strerror or exc}); choose a writable "
            "path with -o"
        ) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:  # a full disk, a quota: the target is left as it was
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise error(
            f"cannot write {what} to {target} ({exc.strerror or exc}); the previous file is "
            "unchanged; free space or choose another path with -o"
        ) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # persist the rename (POSIX); not possible everywhere
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return target


def write_text(text: str, target: str | os.PathLike[str], what: str = "output") -> Path:
    """:func:`write_file` of UTF-8 text."""
    return write_file(text.encode("utf-8"), target, what)


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

    def open(self, target: Path, what: str) -> Path:
        """An empty temporary folder beside ``target``; :meth:`commit` replaces ``target`` whole
        with it (check an existing ``target`` with :func:`check_replaceable` first)."""
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
