"""Imports run one way: no module imports one in a higher layer (docs/architecture.md).

The layers are declared once, in pyproject.toml's ``[[tool.lm_eval_robust.layers]]``, each by its
folder: a module's layer is the top-level folder of the package it sits in. docs/architecture.md
is checked against that declaration and lm_eval_robust/LAYERS.md is generated from it
(scripts/gen_layers.py).

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

#: bottom to top, as pyproject.toml's ``[[tool.lm_eval_robust.layers]]`` declares them
LAYERS = gen_layers.declared_layers(ROOT)


def module_files() -> dict[str, Path]:
    """Every module of the package (and the start-up hook) by dotted name."""
    return dict(gen_layers.module_files(ROOT))


def layer_of(module: str) -> int:
    """Index of the module's layer (a ``KeyError`` for a module in no layer's folder)."""
    return int(gen_layers.layer_index(LAYERS, module))


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
                    f"{path.relative_to(ROOT)}:{line}: {module} ({LAYERS[mine].name}) imports "
                    f"{target} ({LAYERS[theirs].name})"
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
        "move these modules into their layer's folder (pyproject.toml "
        f"[[tool.lm_eval_robust.layers]] names the folders): {missing}"
    )


def test_a_module_outside_the_layer_folders_has_no_layer() -> None:
    with pytest.raises(KeyError):
        layer_of("lm_eval_robust.not_in_a_folder")
    assert LAYERS[layer_of("lm_eval_robust.report.not_declared")].name == "report"
    assert LAYERS[layer_of("lm_eval_robust.scoring.fit.not_declared")].name == "model + correction"


def test_each_layer_is_one_top_level_folder() -> None:
    """Each declared package is a folder directly inside the package, one per layer, and every
    top-level folder of the package is a layer's."""
    files = module_files()
    top = {m for m in files if m.count(".") == 1 and files[m].name == "__init__.py"}
    declared = [layer.package for layer in LAYERS]
    assert len(set(declared)) == len(declared), f"two layers declare one folder: {declared}"
    assert set(declared) == top, (
        f"folders without a layer: {sorted(top - set(declared))}; "
        f"layers without a folder: {sorted(set(declared) - top)}"
    )


def folder_problems(layers: list, modules: list[str]) -> list[str]:
    """Folders whose modules belong to more than one layer."""
    return [
        f"{folder} holds modules of {', '.join(names)}"
        for folder, names in gen_layers.folders(layers, modules).items()
        if len(names) > 1
    ]


def test_each_folder_holds_one_layer() -> None:
    found = folder_problems(LAYERS, sorted(module_files()))
    assert not found, "a folder spans layers:\n" + "\n".join(found)


def test_the_folder_check_sees_a_folder_that_spans_two_layers() -> None:
    """A module of the task folder claimed by the registration layer splits `tasks/` in two."""
    layers = [
        gen_layers.Layer(la.name, la.about, la.package, (*la.outside, "lm_eval_robust.tasks.ni"))
        if la.name == "registration"
        else la
        for la in LAYERS
    ]
    assert folder_problems(layers, sorted(module_files())) == [
        "lm_eval_robust/tasks/ holds modules of task, registration"
    ]


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
    (pkg / "scoring").mkdir(parents=True)
    (pkg / "cli").mkdir()
    (pkg / "scoring" / "model.py").write_text(
        "def f():\n    from lm_eval_robust.cli import main\n    return main\n"
    )
    (pkg / "cli" / "__init__.py").write_text("def main():\n    return 0\n")
    files = {
        "lm_eval_robust.scoring.model": pkg / "scoring" / "model.py",
        "lm_eval_robust.cli": pkg / "cli" / "__init__.py",
    }
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = violations(files)
    finally:
        ROOT = saved
    assert found == [
        f"{Path(PACKAGE) / 'scoring' / 'model.py'}:2: lm_eval_robust.scoring.model "
        "(model + correction) imports lm_eval_robust.cli (commands)"
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
    """Modules a layer's paragraph leaves out (package ``__init__`` files aside), modules named in
    the wrong layer, and a paragraph that does not name its layer's folder."""
    files = module_files()
    modules = sorted(files)
    home = {doc_name(m): LAYERS[layer_of(m)].name for m in modules}
    out = []
    for i, (layer, (_, text)) in enumerate(zip(LAYERS, doc_layers(doc), strict=True)):
        named = set(re.findall(r"`([^`]+)`", text))
        if f"`{layer.folder}`" not in text.split(":")[0]:
            out.append(f"{layer.name} does not name its folder `{layer.folder}` before the colon")
        mine = [
            m
            for m in modules
            if layer_of(m) == i and (files[m].name != "__init__.py" or m in layer.outside)
        ]
        out += [
            f"{layer.name} leaves out `{doc_name(m)}`" for m in mine if doc_name(m) not in named
        ]
        out += [
            f"{layer.name} names `{n}`, a module of {home[n]}"
            for n in sorted(named)
            if home.get(n, layer.name) != layer.name
        ]
    return out


def test_the_doc_lists_the_declared_layers_in_order() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert [name for name, _ in doc_layers(doc)] == [layer.name for layer in LAYERS]


def test_the_doc_names_each_module_in_its_own_layer() -> None:
    """Each layer's paragraph names its folder and every module in it, and none of another layer."""
    found = doc_problems(DOC.read_text(encoding="utf-8"))
    assert not found, "docs/architecture.md disagrees with the folders:\n" + "\n".join(found)


def test_the_doc_check_sees_a_missing_and_a_misplaced_module() -> None:
    """`scoring.model` moved from its own paragraph into the task paragraph is reported twice."""
    doc = DOC.read_text(encoding="utf-8")
    layers = doc_layers(doc)
    task = dict(layers)["task"]
    model = dict(layers)["model + correction"]
    assert "`scoring.model`" in model
    moved = doc.replace(model, model.replace("`scoring.model`", "scoring.model")).replace(
        task, task.replace("`tasks.ni`", "`tasks.ni`, `scoring.model`")
    )
    assert doc_problems(moved) == [
        "task names `scoring.model`, a module of model + correction",
        "model + correction leaves out `scoring.model`",
    ]


def test_the_doc_shows_the_current_tree() -> None:
    """The folder tree in docs/architecture.md is the one gen_layers.tree draws from the package."""
    doc = DOC.read_text(encoding="utf-8")
    modules = sorted(module_files())
    expected = "\n".join(gen_layers.tree(LAYERS, modules))
    assert f"```\n{expected}\n```" in doc, (
        "update the tree in docs/architecture.md to:\n" + expected
    )


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
