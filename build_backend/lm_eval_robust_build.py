"""PEP 517 build backend of lm-eval-robust: setuptools, plus the start-up hook in every wheel.

``lm_eval_robust_hook.pth`` must land at the root of site-packages, where the interpreter reads
``.pth`` files at start-up. A wheel places its root files there, so this backend lets setuptools
build the wheel (``build_wheel``) or the editable wheel (``build_editable``, what ``pip install -e``
asks for) and then adds the ``.pth`` to the archive, with its line in the wheel's ``RECORD``.
Everything else, sdists and metadata included, is setuptools' own.

In an editable install the ``.pth`` imports ``_lm_eval_robust_hook`` from the checkout through
setuptools' editable finder, which its own ``__editable__.*.pth`` installs first: the interpreter
reads ``.pth`` files in sorted name order, and ``__editable__`` sorts before ``lm_eval_robust``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools

PTH_NAME = "lm_eval_robust_hook.pth"
PTH_SOURCE = Path(__file__).resolve().parent.parent / PTH_NAME

get_requires_for_build_wheel = _setuptools.get_requires_for_build_wheel
get_requires_for_build_editable = _setuptools.get_requires_for_build_editable
get_requires_for_build_sdist = _setuptools.get_requires_for_build_sdist
prepare_metadata_for_build_wheel = _setuptools.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable
build_sdist = _setuptools.build_sdist

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return f"{name},sha256={digest},{len(data)}\n"


def add_pth(wheel: Path, pth_name: str = PTH_NAME, pth_source: Path = PTH_SOURCE) -> None:
    """Rewrite ``wheel`` with ``pth_name`` (the bytes of ``pth_source``) at its root."""
    data = pth_source.read_bytes()
    tmp = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(wheel) as src:
        records = [i for i in src.infolist() if i.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise RuntimeError(
                f"{wheel.name}: expected one .dist-info/RECORD, found {len(records)}"
            )
        record = records[0]
        names = {i.filename for i in src.infolist()}
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                if info.filename not in (record.filename, pth_name):
                    dst.writestr(info, src.read(info))
            dst.writestr(pth_name, data)
            lines = src.read(record).decode("utf-8").splitlines(keepends=True)
            if pth_name in names:
                lines = [ln for ln in lines if not ln.startswith(pth_name + ",")]
            lines.append(_record_line(pth_name, data))
            dst.writestr(record, "".join(lines))
    os.replace(tmp, wheel)


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name: str = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    add_pth(Path(wheel_directory) / name)
    return name


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name: str = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_pth(Path(wheel_directory) / name)
    return name
