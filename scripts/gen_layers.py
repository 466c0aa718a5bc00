"""Write lm_eval_robust/LAYERS.md from the one declaration of the layers (pyproject.toml).

    python scripts/gen_layers.py           # rewrite lm_eval_robust/LAYERS.md
    python scripts/gen_layers.py --check   # exit 1 when it is stale

The layers are declared once, as ``[[tool.lm_eval_robust.layers]]`` in pyproject.toml, bottom to
top, each by its folder (``package``): a module's layer is the top-level folder of the package it
sits in. Only the package root and the start-up hook sit in no layer folder; the registration
layer names them (``outside``). tests/test_layers.py reads the same declaration to check every
import and that each folder holds one layer, checks docs/architecture.md against it (the folder
tree there is :func:`tree`) and checks that LAYERS.md is current.
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
    """One layer: its name, one line on what it holds, its folder (a subpackage of the package)
    and the modules outside every layer folder that belong to it (the package root, the hook)."""

    name: str
    about: str
    package: str
    outside: tuple[str, ...] = ()

    @property
    def folder(self) -> str:
        """The layer's folder as ``ls`` shows it inside the package: ``base/``."""
        return self.package.removeprefix(PACKAGE + ".").replace(".", "/") + "/"

    def holds(self, module: str) -> bool:
        """Whether ``module`` sits in the layer's folder (or is one of its ``outside`` modules)."""
        return (
            module == self.package
            or module.startswith(self.package + ".")
            or module in self.outside
        )


def declared_layers(root: Path = ROOT) -> list[Layer]:
    """The layers of pyproject.toml's ``[[tool.lm_eval_robust.layers]]``, bottom to top."""
    with (root / "pyproject.toml").open("rb") as fh:
        table = tomllib.load(fh)
    rows = table.get("tool", {}).get("lm_eval_robust", {}).get("layers")
    if not rows:
        raise SystemExit(
            "gen_layers.py: error: pyproject.toml declares no layers; add "
            "[[tool.lm_eval_robust.layers]] tables with name, about and package"
        )
    return [Layer(r["name"], r["about"], r["package"], tuple(r.get("outside", ()))) for r in rows]


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package (and the start-up hook) by dotted name."""
    out = {HOOK: root / f"{HOOK}.py"}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def layer_index(layers: list[Layer], module: str) -> int:
    """Index of the module's layer, bottom up (a ``KeyError`` for a module in no layer's folder)."""
    for i, layer in enumerate(layers):  # a module a layer names as `outside` is that layer's
        if module in layer.outside:
            return i
    for i, layer in enumerate(layers):
        if layer.holds(module):
            return i
    raise KeyError(module)


def folder_of(module: str, modules: list[str]) -> str:
    """The folder a module's file sits in: a package's own folder, else its parent's."""
    parts = module.split(".")
    sub = any(o.startswith(module + ".") for o in modules)
    return "/".join(parts if sub else parts[:-1]) + "/"


def folders(layers: list[Layer], modules: list[str]) -> dict[str, list[str]]:
    """Each folder of the package (``lm_eval_robust/`` first) and the layers its modules are in."""
    out: dict[str, set[int]] = {}
    for module in modules:
        if module == HOOK:
            continue  # the hook sits beside the package
        try:
            index = layer_index(layers, module)
        except KeyError:
            continue  # test_layers names the modules without a layer
        out.setdefault(folder_of(module, modules), set()).add(index)
    return {
        f: [layers[i].name for i in sorted(out[f])]
        for f in sorted(out, key=lambda f: (f != f"{PACKAGE}/", f))
    }


def tree(layers: list[Layer], modules: list[str]) -> list[str]:
    """The package's folders as a tree, each top-level folder with its layer, and the number of
    modules (``__init__`` left out) in each folder."""
    counts: dict[str, int] = {}
    for module in modules:
        if (
            module != HOOK
            and module.startswith(PACKAGE + ".")
            and not any(o.startswith(module + ".") for o in modules)
        ):
            folder = folder_of(module, modules)
            counts[folder] = counts.get(folder, 0) + 1
    subfolders = sorted({folder_of(m, modules) for m in modules if m.startswith(PACKAGE + ".")})

    def label(folder: str) -> str:
        n = counts.get(folder, 0)
        return f"{n} module{'s' if n != 1 else ''}"

    lines = [f"{PACKAGE}/{'':<5}__init__.py: the package root (registration)"]
    for i, layer in enumerate(layers):
        top = f"{PACKAGE}/{layer.folder}"
        last = i == len(layers) - 1
        lines.append(
            f"{'└' if last else '├'}── {layer.folder:<16}{i + 1}. {layer.name}, {label(top)}"
        )
        inner = [f for f in subfolders if f.startswith(top) and f != top]
        for j, sub in enumerate(inner):
            name = sub.removeprefix(top)
            branch = "└" if j == len(inner) - 1 else "├"
            lines.append(f"{' ' if last else '│'}   {branch}── {name:<12}{label(sub)}")
    return lines


def render(layers: list[Layer], modules: list[str]) -> str:
    """LAYERS.md: the folder tree, then each layer, bottom to top, with the modules it holds."""
    lines = [
        "# Layers of lm_eval_robust, bottom to top",
        "",
        "Generated from `[[tool.lm_eval_robust.layers]]` in pyproject.toml by",
        "`python scripts/gen_layers.py`; do not edit. Each layer is one folder of the package; a",
        "module imports only its own layer and the layers below it (checked by",
        "tests/test_layers.py); docs/architecture.md says what each module does.",
        "",
        "```",
        *tree(layers, modules),
        "```",
    ]
    for i, layer in enumerate(layers, 1):
        members = [m for m in modules if layer_index(layers, m) == i - 1]
        lines += [
            "",
            f"## {i}. {layer.name}: `{PACKAGE}/{layer.folder}`",
            "",
            f"{layer.about[0].upper()}{layer.about[1:]}.",
            "",
        ]
        lines += [f"- `{m}`" for m in members]
    lines += ["", "## By folder", "", "| folder | layer of its modules |", "|---|---|"]
    for folder, names in folders(layers, modules).items():
        lines.append(f"| `{folder}` | {', '.join(names)} |")
    return "\n".join(lines) + "\n"


def _safe_index(layers: list[Layer], module: str) -> int:
    try:
        return layer_index(layers, module)
    except KeyError:
        return -1


def current(root: Path = ROOT) -> str:
    layers = declared_layers(root)
    modules = [m for m in sorted(module_files(root)) if _safe_index(layers, m) >= 0]
    return render(layers, modules)


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
