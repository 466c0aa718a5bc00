"""pyproject.toml's entry points: in the shape of upstream's plugin guide (the metric ones are
generated from the one list of names; tests/test_harness_names.py checks them)."""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.util
import sys
import tomllib
import types
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENTRY_POINTS: dict[str, dict[str, str]] = tomllib.loads(
    (REPO / "pyproject.toml").read_text(encoding="utf-8")
)["project"]["entry-points"]


def _load(value: str) -> object:
    module, _, attr = value.partition(":")
    return getattr(importlib.import_module(module), attr)


def test_model_entry_point_names_the_class() -> None:
    from lm_eval_robust.scoring.model import DebiasedHFLM

    assert ENTRY_POINTS["lm_eval.models"] == {
        "debiased_hf": "lm_eval_robust.scoring.model:DebiasedHFLM"
    }
    assert _load(ENTRY_POINTS["lm_eval.models"]["debiased_hf"]) is DebiasedHFLM


def test_task_entry_point_names_the_package_holding_the_yamls() -> None:
    (value,) = ENTRY_POINTS["lm_eval.tasks"].values()
    assert ":" not in value  # a package, resolved to its directory, not a function to call
    package = importlib.import_module(value)
    (location,) = package.__path__
    assert (Path(location) / "_ni_yaml").is_file()
    assert (Path(location) / "ni065_format_pert.yaml").is_file()


def test_builtin_metrics_survive_our_registration() -> None:
    from lm_eval.api.registry import get_aggregation, get_metric

    import lm_eval_robust.harness.harness_metrics  # noqa: F401

    assert get_metric("acc") is not None
    assert get_aggregation("mean") is not None


def test_hook_stands_aside_where_lm_eval_reads_task_entry_points() -> None:
    from lm_eval_robust.harness import _plugin

    class FakeTaskManager:
        def __init__(self, include_path: object = None, include_defaults: bool = True) -> None:
            self.include_path = include_path

    reads = types.SimpleNamespace(
        TaskManager=FakeTaskManager,
        manager=types.SimpleNamespace(TASKS_ENTRY_POINT_GROUP="lm_eval.tasks"),
    )
    _plugin.register_tasks(reads)  # type: ignore[arg-type]
    assert FakeTaskManager().include_path is None

    plain = types.SimpleNamespace(TaskManager=FakeTaskManager)
    _plugin.register_tasks(plain)  # type: ignore[arg-type]
    assert FakeTaskManager().include_path == [_plugin.task_dir()]


def test_backend_adds_the_pth_to_a_wheel_with_its_record_line(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "build_backend"))
    try:
        backend = importlib.import_module("lm_eval_robust_build")
    finally:
        sys.path.remove(str(REPO / "build_backend"))
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("demo/__init__.py", "x = 1\n")
        zf.writestr(
            "demo-1.0.dist-info/RECORD", "demo/__init__.py,,\ndemo-1.0.dist-info/RECORD,,\n"
        )
    backend.add_pth(wheel)
    backend.add_pth(wheel)  # idempotent: one file, one RECORD line
    data = (REPO / "lm_eval_robust_hook.pth").read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(wheel) as zf:
        assert zf.namelist().count("lm_eval_robust_hook.pth") == 1
        assert zf.read("lm_eval_robust_hook.pth") == data
        assert zf.read("demo/__init__.py") == b"x = 1\n"
        record = zf.read("demo-1.0.dist-info/RECORD").decode().splitlines()
    assert record.count(f"lm_eval_robust_hook.pth,sha256={digest},{len(data)}") == 1
    assert "import _lm_eval_robust_hook" in data.decode()


@pytest.mark.parametrize("name", ["lm_eval.models", "lm_eval.tasks", "lm_eval.api.metrics"])
def test_hook_watches_the_modules_every_supported_release_has(name: str) -> None:
    import _lm_eval_robust_hook

    assert name in _lm_eval_robust_hook._WATCHED
    assert importlib.util.find_spec(name) is not None
