"""Teach lm-eval's ``TaskManager`` the perturbed-variant names, and local data for any task.

Why names resolved on the fly (and not a command that writes YAMLs): a variant needs nothing but
the stock task's own config, which the harness already indexes, so ``--tasks
bigbench_date_understanding_multiple_choice_robust_text`` works for every task lm-eval knows,
built-in or from ``--include_path``, with no file to write, keep in sync or ship. Variants are
never added to the task index: a built-in wildcard (``--tasks "bigbench_*"``) or ``lm_eval ls``
never lists them; only a name asked for explicitly is resolved.

Checks that fail in one line before any model loads (the CLI resolves names first): an unknown
task (with the nearest name), a group or tag (wrap its tasks one by one), an output type the
wrapper cannot perturb (``loglikelihood_rolling``, ``loglikelihood``), and data that cannot be
read offline (``local_data`` folder without the split, or no local copy while the hub is off).

``TaskFactory._load_full_config`` is wrapped too, so that ``--metadata local_data=DIR`` points any
stock task (wrapped or not) at local files (:mod:`.local_data`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from lm_eval_robust.base.validate import nearest
from lm_eval_robust.tasks.wrap.local_data import apply_local_data, dataset_folder, local_files
from lm_eval_robust.tasks.wrap.names import parse
from lm_eval_robust.tasks.wrap.settings import WrapError

_MARK = "__lmer_wrap__"


def _offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    )


def _local_root(metadata: Any) -> str | None:
    if isinstance(metadata, dict) and metadata.get("local_data") not in (None, ""):
        return str(metadata["local_data"])
    return None


def check_data(cfg: dict[str, Any], name: str, root: str | None) -> None:
    """One line when the task's data cannot be read: a local folder without its split, or the
    hub switched off with no local copy and nothing in the datasets cache."""
    if root is not None and local_files(cfg, root) is not None:
        apply_local_data(dict(cfg), root)  # raises on a missing evaluation split
        return
    path = cfg.get("dataset_path")
    if not _offline() or not isinstance(path, str) or Path(path).exists() or path == "json":
        return
    if cfg.get("custom_dataset") is not None:
        return
    try:
        import datasets

        datasets.load_dataset_builder(
            path, cfg.get("dataset_name"), **(cfg.get("dataset_kwargs") or {})
        )
    except Exception:
        where = dataset_folder(cfg, root or "DIR")
        raise WrapError(
            f"{name}: dataset {path}"
            + (f" ({cfg.get('dataset_name')})" if cfg.get("dataset_name") else "")
            + f" is not available offline; put its splits in {where}/<split>.jsonl "
            "(`lm-eval-robust wrap data` writes BIG-bench and GSM8K) and pass "
            '--metadata \'{"local_data": "DIR"}\''
        ) from None


def base_config(manager: Any, name: str) -> dict[str, Any]:
    """The full config of the stock task a variant wraps, checked (one-line errors)."""
    from lm_eval.tasks._index import Kind

    from lm_eval_robust.harness.wrap_task import check_output_type

    variant = parse(name)
    assert variant is not None
    entry = manager._index.get(variant.base)
    if entry is None:
        near = nearest(variant.base, manager._index.keys())
        hint = f"; did you mean {near!r}?" if near else "; `lm_eval ls tasks` lists them"
        raise WrapError(f"{name}: lm-eval knows no task {variant.base!r}{hint}")
    if entry.kind in (Kind.GROUP, Kind.TAG):
        what = "group" if entry.kind == Kind.GROUP else "tag"
        raise WrapError(
            f"{name}: {variant.base} is a {what}; wrap its tasks one by one "
            f"(`lm-eval-robust wrap list {variant.base}` prints their variant names)"
        )
    cfg = manager._factory._load_full_config(entry, None)
    if "class" in cfg:
        raise WrapError(
            f"{name}: {variant.base} is a Python task class; only tasks configured in YAML can be "
            "wrapped"
        )
    check_output_type(name, variant.base, str(cfg.get("output_type") or "generate_until"))
    check_data(cfg, name, _local_root(cfg.get("metadata")))
    return cfg


def _entry_of(manager: Any, name: str) -> Any:
    from lm_eval.tasks._index import Entry, Kind

    from lm_eval_robust.harness.wrap_task import BASE_KEY, WrappedTask

    cfg = {"task": name, "class": WrappedTask, BASE_KEY: base_config(manager, name)}
    return Entry(name=name, kind=Kind.PY_TASK, yaml_path=None, cfg=cfg)


def _patched_entry(original: Any) -> Any:
    @functools.wraps(original)
    def _entry(self: Any, name: str) -> Any:
        found = original(self, name)
        if found is None and isinstance(name, str) and parse(name) is not None:
            return _entry_of(self, name)
        return found

    return _entry


def _patched_match(original: Any) -> Any:
    @functools.wraps(original)
    def match_tasks(self: Any, task_list: list[str]) -> list[str]:
        matched = list(original(self, task_list))
        for name in task_list:
            if name in matched or name in self._index or parse(name) is None:
                continue
            if any(ch in name for ch in "*?["):
                continue
            base_config(self, name)  # one-line errors before any model loads
            matched.append(name)
        return matched

    return match_tasks


def _patched_load_full_config(original: Any) -> Any:
    @functools.wraps(original)
    def _load_full_config(self: Any, entry: Any, overrides: Any = None) -> dict[str, Any]:
        cfg: dict[str, Any] = original(self, entry, overrides)
        root = _local_root(cfg.get("metadata"))
        if root is not None and "task" in cfg and isinstance(cfg.get("dataset_path"), str):
            cfg = apply_local_data(cfg, root)
        return cfg

    return _load_full_config


def install(manager_cls: Any | None = None) -> None:
    """Patch ``TaskManager`` (names) and ``TaskFactory`` (local data); idempotent."""
    if manager_cls is None:
        from lm_eval.tasks import TaskManager

        manager_cls = TaskManager
    if not hasattr(manager_cls, "_entry") or not hasattr(manager_cls, "match_tasks"):
        return  # lm-eval before 0.4.13 indexes tasks differently: variants need 0.4.13
    if not getattr(manager_cls, _MARK, False):
        manager_cls._entry = _patched_entry(manager_cls._entry)
        manager_cls.match_tasks = _patched_match(manager_cls.match_tasks)
        setattr(manager_cls, _MARK, True)
    from lm_eval.tasks._factory import TaskFactory

    if not getattr(TaskFactory, _MARK, False):
        TaskFactory._load_full_config = _patched_load_full_config(TaskFactory._load_full_config)
        setattr(TaskFactory, _MARK, True)
