"""The wheel ships every subpackage: `[tool.setuptools] packages` lists each package folder.

A subpackage missing from that list works in an editable install (the folder is on the path) and
is absent from a wheel, where its first import fails.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_in_the_wheel() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(conf["tool"]["setuptools"]["packages"])
    pkg = ROOT / "lm_eval_robust"
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in pkg.rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    missing = sorted(found - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
