"""Imports run one way: no module imports one in a higher layer (docs/architecture.md).

Every module of the package is read with ``ast`` (nothing is imported), and every import counts:
at module level, inside functions, and under ``if TYPE_CHECKING``. A module may import its own
layer and the layers below it; the failure names each import that reaches up.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lm_eval_robust"

#: bottom to top; ``pkg.*`` names a package and every module in it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "lm_eval_robust.errors",
            "lm_eval_robust.defaults",
            "lm_eval_robust.atomic",
            "lm_eval_robust.validate",
            "lm_eval_robust.offline_models",
            "lm_eval_robust.task_files",
            "lm_eval_robust.harness_names",
            "lm_eval_robust.vllm_alias",
        ),
    ),
    (
        "task",
        (
            "lm_eval_robust.perturb.*",
            "lm_eval_robust.tasks",
            "lm_eval_robust.tasks.settings",
            "lm_eval_robust.tasks.specs",
            "lm_eval_robust.tasks.data",
            "lm_eval_robust.tasks.ni",
            "lm_eval_robust.tasks.harness_task",
            "lm_eval_robust.generation",
            "lm_eval_robust.generation.data",
            "lm_eval_robust.generation.metrics",
            "lm_eval_robust.generation.tasks",
            "lm_eval_robust.wrap",
            "lm_eval_robust.wrap.names",
            "lm_eval_robust.wrap.settings",
            "lm_eval_robust.wrap.parts",
            "lm_eval_robust.wrap.local_data",
            "lm_eval_robust.wrap.convert",
        ),
    ),
    (
        "requests",
        (
            "lm_eval_robust.tasks.yamls",
            "lm_eval_robust.generation.yamls",
        ),
    ),
    (
        "model + correction",
        (
            "lm_eval_robust.heads",
            "lm_eval_robust.fit",
            "lm_eval_robust.fit.ridge",
            "lm_eval_robust.fit.folds",
            "lm_eval_robust.fingerprint",
            "lm_eval_robust.correction",
            "lm_eval_robust.debias",
            "lm_eval_robust.lora",
            "lm_eval_robust.lora_train",
            "lm_eval_robust.prefix_cache",
            "lm_eval_robust.generation.layers",
            "lm_eval_robust.generation.fit",
            "lm_eval_robust.generation.tune",
            "lm_eval_robust.generation.gen_score",
            "lm_eval_robust.cpu_dtype",
            "lm_eval_robust.feature_shards",
            "lm_eval_robust.cache_keys",
            "lm_eval_robust.feature_collector",
            "lm_eval_robust.label_scores",
            "lm_eval_robust.model",
            "lm_eval_robust.export",
            "lm_eval_robust.vllm_model",
        ),
    ),
    (
        "per-doc values",
        (
            "lm_eval_robust.fit.features",
            "lm_eval_robust.metrics",
            "lm_eval_robust.metrics.ties",
            "lm_eval_robust.metrics.complete",
            "lm_eval_robust.report.pairing",
        ),
    ),
    (
        "aggregation",
        (
            "lm_eval_robust.metrics.classification",
            "lm_eval_robust.metrics.margins",
            "lm_eval_robust.metrics.certificates",
            "lm_eval_robust.metrics.certificate_checks",
            "lm_eval_robust.metrics.certify",
            "lm_eval_robust.metrics.bootstrap",
            "lm_eval_robust.metrics.robustness",
            "lm_eval_robust.metrics.stderr",
            "lm_eval_robust.metrics.exact_cert",
            "lm_eval_robust.metrics.cert_splits",
            "lm_eval_robust.metrics.spread_null",
            "lm_eval_robust.metrics.paired_tests",
            "lm_eval_robust.fit.radii",
            "lm_eval_robust.fit.ridge_cv",
            "lm_eval_robust.fit.constant",
            "lm_eval_robust.fit.clean_cal",
            "lm_eval_robust.fit.measure",
            "lm_eval_robust.fit.run",
            "lm_eval_robust.fit.auto",
            "lm_eval_robust.wrap.metrics",
        ),
    ),
    (
        "registration",
        (
            "lm_eval_robust.harness_logs",
            "lm_eval_robust.harness_metrics",
            "lm_eval_robust.wrap.task",
            "lm_eval_robust.wrap.resolve",
            "lm_eval_robust._plugin",
            "lm_eval_robust",
            "_lm_eval_robust_hook",
        ),
    ),
    (
        "report",
        (
            "lm_eval_robust.report.*",
            "lm_eval_robust.targets",
            "lm_eval_robust.replay_posthoc",
            "lm_eval_robust.replay",
            "lm_eval_robust.generation.table",
            "lm_eval_robust.generation.sweep",
        ),
    ),
    ("commands", ("lm_eval_robust.cli.*",)),
]


def module_files() -> dict[str, Path]:
    """Every module of the package (and the start-up hook) by dotted name."""
    out = {"_lm_eval_robust_hook": ROOT / "_lm_eval_robust_hook.py"}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def layer_of(module: str) -> int:
    """Index of the module's layer (a ``KeyError`` for a module no layer names)."""
    for i, (_, members) in enumerate(LAYERS):
        for m in members:
            pkg = m.removesuffix(".*")
            if module == m or (
                m.endswith(".*") and (module == pkg or module.startswith(pkg + "."))
            ):
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
    assert not missing, f"give these modules a layer in tests/test_layers.py: {missing}"


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
    files = {"lm_eval_robust.model": pkg / "model.py", "lm_eval_robust.cli": pkg / "cli.py"}
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = violations(files)
    finally:
        ROOT = saved
    assert found == [
        f"{Path(PACKAGE) / 'model.py'}:2: lm_eval_robust.model (model + correction) imports "
        "lm_eval_robust.cli (commands)"
    ]


def test_layers_are_the_documented_ones() -> None:
    """docs/architecture.md lists the layers in the order this test checks."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    doc = doc[doc.index("Bottom to top:") :]
    positions = [doc.find(f"**{name}**") for name, _ in LAYERS]
    assert -1 not in positions, "every layer is named in bold in docs/architecture.md"
    assert positions == sorted(positions), "the doc lists the layers bottom to top"


def test_model_args_listed_for_validation_match_the_model() -> None:
    """validate.DEBIASED_HF_ARGS (read without importing the model) is debiased_hf's own args."""
    from lm_eval_robust.model import DebiasedHFLM
    from lm_eval_robust.validate import DEBIASED_HF_ARGS

    params = inspect.signature(DebiasedHFLM.__init__).parameters.values()
    own = [p.name for p in params if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD]
    assert sorted(own) == sorted(DEBIASED_HF_ARGS)


@pytest.mark.parametrize("module", ["lm_eval_robust.model", "lm_eval_robust.prefix_cache"])
def test_application_does_not_reach_training(module: str) -> None:
    """Applying a LoRA adapter (the model) never imports LoRA training."""
    files = module_files()
    targets = {t for _, t in imports_of(module, files[module], set(files))}
    assert "lm_eval_robust.lora_train" not in targets
