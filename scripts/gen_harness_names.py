"""Write everything generated from the one list of harness names
(lm_eval_robust.base.harness_names).

    python scripts/gen_harness_names.py           # rewrite task_yamls/ and pyproject.toml's block
    python scripts/gen_harness_names.py --check   # exit 1 and name the files that drifted

Generated: the task YAMLs (their ``metric_list``, task names and group metrics) and the
``lm_eval.metrics`` / ``lm_eval.aggregations`` entry points in pyproject.toml. The harness
registration (lm_eval_robust.harness.harness_metrics) reads the list at import.
tests/test_harness_names.py checks that all three agree.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from lm_eval_robust.base.harness_names import (
    ENTRY_POINTS_BEGIN,
    ENTRY_POINTS_END,
    render_entry_points,
)
from lm_eval_robust.requests.ni_yamls import render_yamls, write_yamls

ROOT = Path(__file__).resolve().parents[1]


def pyproject_with_entry_points(text: str) -> str:
    """``text`` (pyproject.toml) with its generated block replaced by the current one."""
    if ENTRY_POINTS_BEGIN not in text or ENTRY_POINTS_END not in text:
        raise SystemExit(
            "gen_harness_names.py: error: pyproject.toml has no generated block; add the lines "
            f"{ENTRY_POINTS_BEGIN.strip()!r} and {ENTRY_POINTS_END.strip()!r}"
        )
    head, rest = text.split(ENTRY_POINTS_BEGIN, 1)
    _, tail = rest.split(ENTRY_POINTS_END, 1)
    return head + render_entry_points() + tail


def drifted(root: Path = ROOT) -> list[str]:
    """The generated files that differ from what the list gives (relative paths)."""
    out = []
    yamls = root / "task_yamls"
    want = render_yamls()
    have = {p.name for p in yamls.glob("*.yaml")} | {p.name for p in yamls.glob("_*_yaml")}
    for name in sorted(have | set(want)):
        path = yamls / name
        if name not in want or not path.is_file() or path.read_text("utf-8") != want[name]:
            out.append(f"task_yamls/{name}")
    pyproject = (root / "pyproject.toml").read_text("utf-8")
    if pyproject_with_entry_points(pyproject) != pyproject:
        out.append("pyproject.toml")
    return out


def write(root: Path = ROOT) -> None:
    write_yamls(root / "task_yamls")
    path = root / "pyproject.toml"
    text = pyproject_with_entry_points(path.read_text("utf-8"))
    with tempfile.NamedTemporaryFile("w", dir=root, delete=False, encoding="utf-8") as fh:
        fh.write(text)
    Path(fh.name).replace(path)


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        stale = drifted()
        if stale:
            print(
                f"gen_harness_names.py: {len(stale)} generated files are stale "
                f"({', '.join(stale[:5])}); run python scripts/gen_harness_names.py",
                file=sys.stderr,
            )
            return 1
        return 0
    if argv:
        print("usage: python scripts/gen_harness_names.py [--check]", file=sys.stderr)
        return 2
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
