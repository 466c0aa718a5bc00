"""How lm-eval finds our model, tasks and metrics.

The lm-eval releases we support (0.4.11 to 0.4.13) have no plugin discovery. Three routes lead
here:

* the start-up hook (``_lm_eval_robust_hook``, installed as a .pth file by both ``pip install .``
  and ``pip install -e .``) calls :func:`on_import` right after ``lm_eval.models``,
  ``lm_eval.tasks`` or ``lm_eval.api.metrics`` load, so plain ``lm_eval --model debiased_hf
  --tasks ni065_format_pert`` works with no flags while ``--model hf`` and every built-in task
  keep working (we register *after* the built-ins, never instead of them). It does only what
  bare ``lm_eval`` needs: the model names (placeholders, imported on first use), our task
  directory, and the clustered standard errors of our aggregations. It adds nothing to lm-eval's
  metric and aggregation registries (our YAMLs name their aggregations with ``!function``) and
  imports nothing heavy (no scipy, torch or transformers at ``TaskManager()`` time);
* ``lm-eval-robust run ...`` calls :func:`register` explicitly before running the harness CLI,
  which also registers our metrics under their ``robust_`` names
  (:mod:`lm_eval_robust.base.harness_names`);
* Python users call :func:`register`, or pass ``TaskManager(include_path=task_dir())``.

The entry points declared in pyproject.toml (``lm_eval.models``, ``lm_eval.tasks``, and the metrics
and aggregations that ``scripts/gen_harness_names.py`` writes from the one list of names) have the
shape of upstream's plugin guide. No supported release reads them; they point at the same objects,
so a release that reads them finds us without the hook, and the hook then stands aside (the model
is registered only if absent, the tasks only where the harness does not read task entry points).
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType
from typing import Any

from lm_eval_robust.base.task_files import task_dir

__all__ = ["register", "task_dir"]

MODEL_NAME = "debiased_hf"
MODEL_TARGET = "lm_eval_robust.scoring.model:DebiasedHFLM"
#: every model we register: name -> target (imported on first use; vLLM only then)
MODELS = {
    MODEL_NAME: MODEL_TARGET,
    "debiased_vllm": "lm_eval_robust.scoring.vllm_model:DebiasedVLLM",
}
TASKS_ENTRY_POINT_GROUP = "lm_eval.tasks"


def register_model() -> None:
    """Register ``debiased_hf`` and ``debiased_vllm`` lazily (placeholders; each class imports on
    first use, so vLLM is imported only by a run that asks for ``debiased_vllm``)."""
    import lm_eval.models  # noqa: F401  (fills the built-ins first)
    from lm_eval.api.registry import model_registry

    for name, target in MODELS.items():
        if name not in model_registry:
            model_registry.register(name, target=target)


def _with_our_tasks(init: Any) -> Any:
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        if bound.arguments.get("include_defaults", True):
            paths = bound.arguments.get("include_path")
            if paths is None:
                paths = []
            elif not isinstance(paths, (list, tuple)):
                paths = [paths]
            ours = task_dir()
            if ours not in [str(p) for p in paths]:
                bound.arguments["include_path"] = [*paths, ours]
        init(*bound.args, **bound.kwargs)

    __init__.__lm_eval_robust__ = True  # type: ignore[attr-defined]
    return __init__


def _flat_load(self: Any, task_list: Any) -> dict[str, dict[str, Any]]:
    """``TaskManager.load`` (lm-eval 0.4.12+) for 0.4.11, over its ``load_task_or_group``.

    0.4.11 returns a nested dict (a task name -> Task, a group -> the dict of its members); this
    flattens it into 0.4.12's ``{"tasks": {name: Task}, "groups": {name: group}, "group_map":
    {group: [member names]}}``.
    """
    nested = self.load_task_or_group(task_list)
    tasks: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    group_map: dict[str, list[str]] = {}

    def walk(level: dict[Any, Any]) -> list[str]:
        names = []
        for key, value in level.items():
            if isinstance(value, dict):
                name = str(getattr(key, "group_name", None) or getattr(key, "group", None) or key)
                groups[name] = key
                group_map[name] = walk(value)
            else:
                name = str(key)
                tasks[name] = value
            names.append(name)
        return names

    walk(nested)
    return {"tasks": tasks, "groups": groups, "group_map": group_map}


def reads_task_entry_points(tasks_module: ModuleType) -> bool:
    """Whether this lm-eval finds task directories through ``lm_eval.tasks`` entry points itself.

    No release does yet; upstream's proposal (lm-evaluation-harness PR #4015) names the group in
    ``lm_eval.tasks.manager.TASKS_ENTRY_POINT_GROUP``. Adding our directory again there would
    index every task twice (one override warning each).
    """
    for module in (tasks_module, getattr(tasks_module, "manager", None)):
        if getattr(module, "TASKS_ENTRY_POINT_GROUP", None) == TASKS_ENTRY_POINT_GROUP:
            return True
    return False


def register_tasks(tasks_module: ModuleType | None = None) -> None:
    """Make every ``TaskManager`` that includes the built-in tasks include ours too.

    ``tasks_module`` is ``lm_eval.tasks``, which holds ``TaskManager`` in every supported release
    (defined there up to 0.4.11, imported from ``lm_eval.tasks.manager`` since 0.4.12). On 0.4.11,
    which lacks ``TaskManager.load``, this also adds it (:func:`_flat_load`).
    """
    if tasks_module is None:
        import lm_eval.tasks

        tasks_module = lm_eval.tasks
    cls = tasks_module.TaskManager
    if not hasattr(cls, "load") and hasattr(cls, "load_task_or_group"):
        cls.load = _flat_load  # our code (and the tests) use 0.4.12's API
    from lm_eval_robust.harness import wrap_resolve

    wrap_resolve.install(cls)  # <task>_robust_text / _robust_format names, local_data for any task
    if reads_task_entry_points(tasks_module):
        return
    if not getattr(cls.__init__, "__lm_eval_robust__", False):
        cls.__init__ = _with_our_tasks(cls.__init__)
    from lm_eval_robust.harness import harness_logs

    harness_logs.install(task_dir())


def _user_error_in(exc: BaseException | None) -> BaseException | None:
    from lm_eval_robust.base.errors import UserError

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, UserError):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def install_excepthook() -> None:
    """Print our one-line user errors without a traceback, whoever runs the harness.

    Any other exception keeps the interpreter's normal report. Set ``LM_EVAL_ROBUST_TRACEBACK=1``
    to see the full traceback of ours too.
    """
    import os
    import sys

    previous = sys.excepthook
    if getattr(previous, "__lm_eval_robust__", False) or os.environ.get("LM_EVAL_ROBUST_TRACEBACK"):
        return

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        ours = _user_error_in(exc)
        if ours is None:
            previous(exc_type, exc, tb)
            return
        print(f"lm-eval-robust: error: {ours}", file=sys.stderr)

    hook.__lm_eval_robust__ = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def register_metrics() -> None:
    """Register our metrics and aggregations through lm-eval's decorators (idempotent)."""
    import lm_eval_robust.harness.harness_metrics  # noqa: F401  (registers on first import)


def _with_our_stderr(original: Any) -> Any:
    @functools.wraps(original)
    def stderr_for_metric(metric: Any, bootstrap_iters: int) -> Any:
        from lm_eval_robust.stats import stderr

        name = stderr.metric_of(metric)
        if name is None or bootstrap_iters <= 0:
            return original(metric, bootstrap_iters)
        return stderr.stderr_for(name, bootstrap_iters)

    stderr_for_metric.__lm_eval_robust__ = True  # type: ignore[attr-defined]
    return stderr_for_metric


def install_stderr(metrics_module: ModuleType | None = None) -> None:
    """Give our aggregations a clustered bootstrap standard error in lm-eval's results.

    lm-eval asks ``stderr_for_metric`` for every metric and writes ``"N/A"`` for any aggregation
    it does not know; the wrapper answers for ours (:mod:`lm_eval_robust.stats.stderr`) and
    leaves every other metric to lm-eval. ``lm_eval.evaluator_utils`` imports the function by
    name, so it is replaced there too when that module is already loaded.
    """
    import sys

    if metrics_module is None:
        import lm_eval.api.metrics

        metrics_module = lm_eval.api.metrics
    modules = [metrics_module, sys.modules.get("lm_eval.evaluator_utils")]
    for module in modules:
        current = getattr(module, "stderr_for_metric", None)
        if current is None or getattr(current, "__lm_eval_robust__", False):
            continue
        module.stderr_for_metric = _with_our_stderr(current)  # type: ignore[union-attr]


def register() -> None:
    """Register the model, the tasks and the metrics with an imported lm-eval."""
    register_model()
    register_tasks()
    register_metrics()
    install_stderr()
    install_excepthook()


def on_import(name: str, module: ModuleType) -> None:
    """Called by the start-up hook right after a watched lm-eval module has loaded."""
    if name == "lm_eval.models":
        register_model()
    elif name == "lm_eval.tasks":
        register_tasks(module)
    elif name == "lm_eval.api.metrics":
        # Our YAMLs name their aggregations with ``!function``: lm-eval's metric registry is
        # left as the built-ins made it (register() adds ours for YAMLs that name them alone).
        install_stderr(module)
    install_excepthook()
