"""lm-eval-robust: robustness to semantically-neutral prompt perturbations, as an lm-eval plugin.

Importing this package is cheap: nothing heavy (torch, transformers, lm_eval) loads until used.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "register", "task_dir"]


def register() -> None:
    """Register ``debiased_hf`` and our tasks with lm-eval (only needed without the hook)."""
    from lm_eval_robust.harness._plugin import register as _register

    _register()


def task_dir() -> str:
    """The directory of our task YAMLs, for ``TaskManager(include_path=task_dir())``."""
    from lm_eval_robust.harness._plugin import task_dir as _task_dir

    return _task_dir()
