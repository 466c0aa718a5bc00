"""harness_logs: the harness's notes filtered for our tasks only."""

from __future__ import annotations

import logging


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("lm_eval.api.task", logging.WARNING, "", 0, message, None, None)


def test_custom_kwargs_note_dropped_for_our_tasks_only() -> None:
    from lm_eval_robust.harness._plugin import task_dir
    from lm_eval_robust.harness.harness_logs import CUSTOM_KWARGS, DropCustomKwargsNote, task_names

    f = DropCustomKwargsNote(task_names(task_dir()))
    assert not f.filter(_record(f"ni065_format_pert: {CUSTOM_KWARGS} in console"))
    assert f.filter(_record(f"some_builtin_task: {CUSTOM_KWARGS} in console"))
    assert f.filter(_record("ni065_format_pert: another warning"))
