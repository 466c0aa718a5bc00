"""Imports run one way: no module imports one in a higher layer (docs/architecture.md).

The layers are declared once, in pyproject.toml's ``[[tool.lm_eval_robust.layers]]``;
docs/architecture.md is checked against that declaration and lm_eval_robust/LAYERS.md is
generated from it (scripts/gen_layers.py).

Every module of the package is read with ``ast`` (nothing is imported), and every import counts:
at module level, inside functions, and under ``if TYPE_CHECKING``. A module may import its own
layer and the layers below it; the failure names each import that reaches up.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lm_eval_robust"


def _gen_layers() -> ModuleType:
    """scripts/gen_layers.py: reads the declaration (pyproject.toml) and writes LAYERS.md."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("gen_layers")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


gen_layers = _gen_layers()

#: bottom to top, as pyproject.toml's ``[[tool.lm_eval_robust.layers]]`` declares them;
#: ``pkg.*`` names a package and every module in it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (layer.name, layer.modules) for layer in gen_layers.declared_layers(ROOT)
]


def module_files() -> dict[str, Path]:
    """Every module of the package (and the start-up hook) by dotted name."""
    return dict(gen_layers.module_files(ROOT))


def layer_of(module: str) -> int:
    """Index of the module's layer (a ``KeyError`` for a module no layer names)."""
    for i, (_, members) in enumerate(LAYERS):
        if any(gen_layers.matches(m, module) for m in members):
            return i
    raise KeyError(module)


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, imported module) for every import of one of our modules, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{source}.{alias.name}"
                found.append((node.lineno, sub if sub in known else source))
    ours = (PACKAGE, "_lm_eval_robust_hook")
    return [(line, name) for line, name in found if name.split(".")[0] in ours]


def violations(files: dict[str, Path]) -> list[str]:
    known = set(files)
    out = []
    for module, path in files.items():
        mine = layer_of(module)
        for line, target in imports_of(module, path, known):
            theirs = layer_of(target)
            if theirs > mine:
                out.append(
                    f"{path.relative_to(ROOT)}:{line}: {module} ({LAYERS[mine][0]}) imports "
                    f"{target} ({LAYERS[theirs][0]})"
                )
    return out


def test_every_module_has_a_layer() -> None:
    missing = []
    for module in module_files():
        try:
            layer_of(module)
        except KeyError:
            missing.append(module)
    assert not missing, (
        f"give these modules a layer in pyproject.toml [[tool.lm_eval_robust.layers]]: {missing}"
    )


def test_a_module_outside_the_declaration_has_no_layer() -> None:
    with pytest.raises(KeyError):
        layer_of("lm_eval_robust.not_declared")
    assert LAYERS[layer_of("lm_eval_robust.report.not_declared")][0] == "report"  # `report.*`


def test_every_named_module_exists() -> None:
    files = module_files()
    stale = [m for _, ms in LAYERS for m in ms if m.removesuffix(".*") not in files]
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_no_module_imports_a_higher_layer() -> None:
    found = violations(module_files())
    assert not found, "imports that reach up a layer:\n" + "\n".join(found)


def test_no_two_modules_import_each_other() -> None:
    files = module_files()
    known = set(files)
    edges = {m: {t for _, t in imports_of(m, p, known) if t != m} for m, p in files.items()}
    both = sorted({tuple(sorted((a, b))) for a, ts in edges.items() for b in ts if a in edges[b]})
    assert not both, f"modules that import each other: {both}"


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """A function-level import of the CLI from the model layer is caught and named."""
    pkg = tmp_path / PACKAGE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(
        "def f():\n    from lm_eval_robust.cli import main\n    return main\n"
    )
    (pkg / "cli.py").write_text("def main():\n    return 0\n")
    files = {"lm_eval_robust.scoring.model": pkg / "model.py", "lm_eval_robust.cli": pkg / "cli.py"}
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = violations(files)
    finally:
        ROOT = saved
    assert found == [
        f"{Path(PACKAGE) / 'model.py'}:2: lm_eval_robust.scoring.model (model + correction) "
        "imports lm_eval_robust.cli (commands)"
    ]


DOC = ROOT / "docs" / "architecture.md"


def doc_layers(doc: str) -> list[tuple[str, str]]:
    """(layer name, its paragraph) for each numbered layer of the doc's layer list, in order."""
    listing = doc[doc.index("Bottom to top:") :].split("\n\n")[1]
    out = []
    for item in re.split(r"^\d+\. ", listing, flags=re.M)[1:]:
        head = re.match(r"\*\*(.+?)\*\*", item)
        assert head, f"a layer in docs/architecture.md starts with its name in bold: {item[:60]!r}"
        out.append((head.group(1), item))
    return out


def doc_name(module: str) -> str:
    """How docs/architecture.md names a module: without the package prefix."""
    return module.removeprefix(PACKAGE + ".")


def doc_problems(doc: str) -> list[str]:
    """Declared modules a layer's paragraph leaves out, and modules named in the wrong layer."""
    home = {doc_name(m): name for name, members in LAYERS for m in members}
    out = []
    for (name, members), (_, text) in zip(LAYERS, doc_layers(doc), strict=True):
        named = set(re.findall(r"`([^`]+)`", text))
        out += [f"{name} leaves out `{doc_name(m)}`" for m in members if doc_name(m) not in named]
        out += [
            f"{name} names `{n}`, a module of {home[n]}"
            for n in sorted(named)
            if home.get(n, name) != name
        ]
    return out


def test_the_doc_lists_the_declared_layers_in_order() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert [name for name, _ in doc_layers(doc)] == [name for name, _ in LAYERS]


def test_the_doc_names_each_module_in_its_own_layer() -> None:
    """Each layer's paragraph names every module of the layer, and none of another layer."""
    found = doc_problems(DOC.read_text(encoding="utf-8"))
    assert not found, "docs/architecture.md disagrees with pyproject.toml:\n" + "\n".join(found)


def test_the_doc_check_sees_a_missing_and_a_misplaced_module() -> None:
    """`scoring.*` moved from its own paragraph into the task paragraph is reported twice."""
    doc = DOC.read_text(encoding="utf-8")
    layers = doc_layers(doc)
    task = dict(layers)["task"]
    model = dict(layers)["model + correction"]
    assert "`scoring.*`" in model
    moved = doc.replace(model, model.replace("`scoring.*`", "scoring")).replace(
        task, task.replace("**task**", "**task** (`scoring.*`)")
    )
    assert doc_problems(moved) == [
        "task names `scoring.*`, a module of model + correction",
        "model + correction leaves out `scoring.*`",
    ]


def test_layers_md_is_current() -> None:
    path = ROOT / gen_layers.LAYERS_MD
    assert path.is_file() and path.read_text("utf-8") == gen_layers.current(ROOT), (
        "run: python scripts/gen_layers.py"
    )


def test_model_args_listed_for_validation_match_the_model() -> None:
    """validate.DEBIASED_HF_ARGS (read without importing the model) is debiased_hf's own args."""
    from lm_eval_robust.base.validate import DEBIASED_HF_ARGS
    from lm_eval_robust.scoring.model import DebiasedHFLM

    params = inspect.signature(DebiasedHFLM.__init__).parameters.values()
    own = [p.name for p in params if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD]
    assert sorted(own) == sorted(DEBIASED_HF_ARGS)


@pytest.mark.parametrize(
    "module", ["lm_eval_robust.scoring.model", "lm_eval_robust.scoring.prefix_cache"]
)
def test_application_does_not_reach_training(module: str) -> None:
    """Applying a LoRA adapter (the model) never imports LoRA training."""
    files = module_files()
    targets = {t for _, t in imports_of(module, files[module], set(files))}
    assert "lm_eval_robust.scoring.lora_train" not in targets
