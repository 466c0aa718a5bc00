"""Write lm_eval_robust/LAYERS.md from the one declaration of the layers (pyproject.toml).

    python scripts/gen_layers.py           # rewrite lm_eval_robust/LAYERS.md
    python scripts/gen_layers.py --check   # exit 1 when it is stale

The layers are declared once, as ``[[tool.lm_eval_robust.layers]]`` in pyproject.toml (bottom to
top; ``pkg.*`` names a package and every module in it). tests/test_layers.py reads the same
declaration to check every import, checks docs/architecture.md against it and checks that
LAYERS.md is current.
"""

from __future__ import annotations

import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lm_eval_robust"
HOOK = "_lm_eval_robust_hook"
LAYERS_MD = Path(PACKAGE) / "LAYERS.md"


@dataclass(frozen=True)
class Layer:
    """One layer: its name, one line on what it holds, and its members (``pkg.*`` allowed)."""

    name: str
    about: str
    modules: tuple[str, ...]


def declared_layers(root: Path = ROOT) -> list[Layer]:
    """The layers of pyproject.toml's ``[[tool.lm_eval_robust.layers]]``, bottom to top."""
    with (root / "pyproject.toml").open("rb") as fh:
        table = tomllib.load(fh)
    rows = table.get("tool", {}).get("lm_eval_robust", {}).get("layers")
    if not rows:
        raise SystemExit(
            "gen_layers.py: error: pyproject.toml declares no layers; add "
            "[[tool.lm_eval_robust.layers]] tables with name, about and modules"
        )
    return [Layer(r["name"], r["about"], tuple(r["modules"])) for r in rows]


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package (and the start-up hook) by dotted name."""
    out = {HOOK: root / f"{HOOK}.py"}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def matches(member: str, module: str) -> bool:
    """Whether a declared member (a module, or ``pkg.*``) covers ``module``."""
    if member.endswith(".*"):
        pkg = member.removesuffix(".*")
        return module == pkg or module.startswith(pkg + ".")
    return module == member


def render(layers: list[Layer], modules: list[str]) -> str:
    """LAYERS.md: each layer bottom to top with the modules it holds (wildcards expanded)."""
    lines = [
        "# Layers of lm_eval_robust, bottom to top",
        "",
        "Generated from `[[tool.lm_eval_robust.layers]]` in pyproject.toml by",
        "`python scripts/gen_layers.py`; do not edit. A module imports only its own layer",
        "and the layers below it (checked by tests/test_layers.py); docs/architecture.md says",
        "what each module does.",
    ]
    for i, layer in enumerate(layers, 1):
        lines += [
            "",
            f"## {i}. {layer.name}",
            "",
            f"{layer.about[0].upper()}{layer.about[1:]}.",
            "",
        ]
        for member in layer.modules:
            if member.endswith(".*"):
                inside = [m for m in modules if matches(member, m)]
                lines.append(f"- `{member}`: " + ", ".join(f"`{m}`" for m in inside))
            else:
                lines.append(f"- `{member}`")
    lines += ["", "## By folder", "", "| folder | layers of its modules |", "|---|---|"]
    for folder, names in folders(layers, modules).items():
        lines.append(f"| `{folder}` | {', '.join(names)} |")
    return "\n".join(lines) + "\n"


def folders(layers: list[Layer], modules: list[str]) -> dict[str, list[str]]:
    """Each folder of the package (``lm_eval_robust/`` first) and the layers its modules are in."""
    out: dict[str, set[int]] = {}
    for module in modules:
        index = next(
            (i for i, layer in enumerate(layers) for m in layer.modules if matches(m, module)), None
        )
        if index is None or module == HOOK:
            continue  # the hook sits beside the package; test_layers names modules without a layer
        parts = module.split(".")
        sub = any(o.startswith(module + ".") for o in modules)
        folder = "/".join(parts if sub else parts[:-1])
        out.setdefault(f"{folder}/", set()).add(index)
    return {
        f: [layers[i].name for i in sorted(out[f])]
        for f in sorted(out, key=lambda f: (f != f"{PACKAGE}/", f))
    }


def current(root: Path = ROOT) -> str:
    return render(declared_layers(root), sorted(module_files(root)))


def main(argv: list[str]) -> int:
    path = ROOT / LAYERS_MD
    if argv == ["--check"]:
        if not path.is_file() or path.read_text("utf-8") != current():
            print(
                f"gen_layers.py: {LAYERS_MD} is stale; run python scripts/gen_layers.py",
                file=sys.stderr,
            )
            return 1
        return 0
    if argv:
        print("usage: python scripts/gen_layers.py [--check]", file=sys.stderr)
        return 2
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8") as fh:
        fh.write(current())
    Path(fh.name).replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
