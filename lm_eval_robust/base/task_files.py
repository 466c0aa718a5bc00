"""Where the task YAMLs are: ``lm_eval_robust/task_yamls`` when installed, ``task_yamls/`` beside
the package in a checkout. A leaf module (no imports of ours), so that any layer may ask."""

from __future__ import annotations

from pathlib import Path


def task_dir() -> str:
    """Directory holding our task YAMLs (installed as ``lm_eval_robust/task_yamls``)."""
    here = Path(__file__).resolve().parents[1]  # the package: base/ is one of its folders
    for candidate in (here / "task_yamls", here.parent / "task_yamls"):
        if (candidate / "_ni_yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(
        "lm-eval-robust: task YAML directory not found; reinstall with `pip install lm-eval-robust`"
    )
