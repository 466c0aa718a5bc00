"""What keeps the oldest supported lm-eval (0.4.11) working, checked on any installed release."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

from lm_eval_robust.harness._plugin import _flat_load, task_dir


def _yaml_functions() -> set[str]:
    found: set[str] = set()
    for path in Path(task_dir()).iterdir():
        if "yaml" in path.name:
            found |= set(re.findall(r"!function ([\w.]+)", path.read_text(encoding="utf-8")))
    return found


def test_every_yaml_function_resolves_the_way_0_4_11_looks_it_up() -> None:
    # 0.4.11: `!function a.b.fn` is `fn` in the file `a.b.py` beside the YAML, loaded by path.
    functions = _yaml_functions()
    assert len(functions) >= 30
    for qual in sorted(functions):
        module_name, _, fn_name = qual.rpartition(".")
        path = Path(task_dir()) / f"{module_name}.py"
        spec = importlib.util.spec_from_file_location(module_name, path.as_posix())
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        real = getattr(importlib.import_module(module_name), fn_name)
        assert getattr(module, fn_name) is real, qual


def test_no_stale_function_files() -> None:
    modules = {qual.rpartition(".")[0] for qual in _yaml_functions()}
    files = {p.stem for p in Path(task_dir()).glob("*.py") if p.name != "__init__.py"}
    assert files == modules


class _Group:
    def __init__(self, name: str) -> None:
        self.group_name = name


class _OldTaskManager:
    """0.4.11's nested result: a task name -> Task, a group -> the dict of its members."""

    def load_task_or_group(self, task_list: list[str]) -> dict[Any, Any]:
        return {
            "ni065_format_pert": "task-a",
            _Group("ni_text_pert"): {"ni065_text_pert": "task-b", "ni069_text_pert": "task-c"},
        }


def test_flat_load_gives_0_4_12_shape_on_0_4_11() -> None:
    out = _flat_load(_OldTaskManager(), ["ni065_format_pert", "ni_text_pert"])
    assert out["tasks"] == {
        "ni065_format_pert": "task-a",
        "ni065_text_pert": "task-b",
        "ni069_text_pert": "task-c",
    }
    assert list(out["groups"]) == ["ni_text_pert"]
    assert out["group_map"] == {"ni_text_pert": ["ni065_text_pert", "ni069_text_pert"]}


def test_installed_task_manager_has_load() -> None:
    from lm_eval.tasks import TaskManager

    assert callable(TaskManager.load)
