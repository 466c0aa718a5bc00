"""Where task data comes from: a local directory, or the canonical online source.

Resolution order: the ``data_dir`` task metadata (``--metadata data_dir=...``), then the
``LM_EVAL_ROBUST_DATA_DIR`` environment variable, then a download from the canonical repository
into the cache. A local directory may be the data root (holding ``natural-instructions/``), the
``natural-instructions`` folder, or its ``tasks`` folder.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.base.offline_models import cache_dir

ENV_VAR = "LM_EVAL_ROBUST_DATA_DIR"
NI_URL = "https://raw.githubusercontent.com/allenai/natural-instructions/master/tasks/{name}.json"


class DataError(UserError, FileNotFoundError):
    """Data that cannot be found or read; the message says how to fix it."""


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path | None:
    """The local data root to use, or None to read the canonical online source."""
    chosen = data_dir if data_dir not in (None, "") else os.environ.get(ENV_VAR) or None
    if chosen is None:
        return None
    source = "--metadata data_dir" if data_dir not in (None, "") else ENV_VAR
    return _existing_dir(str(chosen), source)


def _existing_dir(chosen: str, source: str) -> Path:
    path = Path(chosen).expanduser()
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        tried = f" (tried {path.resolve()} from {Path.cwd()})" if not path.is_absolute() else ""
        raise DataError(
            f"data directory {chosen!r} from {source} {what}{tried}; pass an existing folder "
            f"with --metadata data_dir=DIR or set {ENV_VAR} (an absolute path works from any "
            "folder)"
        )
    return path


def check_data_dir_env() -> None:
    """Refuse a ``LM_EVAL_ROBUST_DATA_DIR`` that is not a folder, before a model loads (the
    tasks read it only after the model has loaded)."""
    chosen = os.environ.get(ENV_VAR)
    if chosen:
        _existing_dir(chosen, ENV_VAR)


def _ni_candidates(root: Path, name: str) -> list[Path]:
    return [
        root / "natural-instructions" / "tasks" / f"{name}.json",
        root / "tasks" / f"{name}.json",
        root / f"{name}.json",
    ]


def _download(url: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            payload = resp.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DataError(
            f"could not download {url} ({exc}); point at a local copy with "
            f"--metadata data_dir=DIR or {ENV_VAR}=DIR"
        ) from None
    from lm_eval_robust.base.atomic import write_file

    write_file(payload, target, "the downloaded task file", DataError)


def load_ni_task(name: str, data_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The parsed JSON of NI task file ``name`` (e.g. ``task065_...``)."""
    root = resolve_data_dir(data_dir)
    if root is not None:
        for path in _ni_candidates(root, name):
            if path.exists():  # a folder, FIFO or unreadable file: _read_json says which
                return _read_json(path)
        raise DataError(
            f"task file {name}.json not found under {str(root)!r} (looked in "
            f"natural-instructions/tasks/, tasks/ and the folder itself); point data_dir at the "
            "folder that holds natural-instructions/"
        )
    cached = cache_dir() / "data" / "natural-instructions" / f"{name}.json"
    if not cached.is_file():
        _download(NI_URL.format(name=name), cached)
    return _read_json(cached)


def _read_json(path: Path) -> dict[str, Any]:
    from lm_eval_robust.base.validate import read_bytes

    fix = "make it readable or point data_dir at another copy"
    raw = read_bytes(path, "task file", fix, DataError)
    try:
        data = json.loads(raw.decode("utf-8"))  # NI files may hold NaN (task158's URL)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is not valid JSON ({exc}); replace the file") from None
    if not isinstance(data, dict) or "Instances" not in data or "Definition" not in data:
        raise DataError(
            f"{path} is not a Natural Instructions task file (no Instances/Definition); replace "
            "the file (or point data_dir at the canonical natural-instructions copy)"
        )
    return data
