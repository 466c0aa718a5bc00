"""The harness's log lines that say nothing useful about our tasks, filtered out.

lm-eval warns "<task>: Custom kwargs can be passed to `--metadata` ..." for every task whose data
comes from a ``custom_dataset`` function: once per task, twenty times in a run of two task tags.
Our tasks do take their settings from ``--metadata`` (the README lists them), so for our tasks
the line is dropped; other tasks keep it.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

CUSTOM_KWARGS = "Custom kwargs can be passed to `--metadata`"
HARNESS_TASK_LOGGER = "lm_eval.api.task"


@functools.cache
def task_names(task_dir: str) -> frozenset[str]:
    """The names of the tasks whose YAMLs are in ``task_dir``."""
    return frozenset(p.stem for p in Path(task_dir).glob("*.yaml"))


class DropCustomKwargsNote(logging.Filter):
    """Drops the custom-kwargs note for our tasks (the message starts with the task name)."""

    def __init__(self, ours: frozenset[str]) -> None:
        super().__init__()
        self.ours = ours

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the harness's business
            return True
        if CUSTOM_KWARGS not in message:
            return True
        task = message.split(":", 1)[0].strip()
        return task not in self.ours


def install(task_dir: str) -> None:
    """Add the filter for the tasks of ``task_dir`` to the harness's task logger (once)."""
    logger = logging.getLogger(HARNESS_TASK_LOGGER)
    if not any(isinstance(f, DropCustomKwargsNote) for f in logger.filters):
        logger.addFilter(DropCustomKwargsNote(task_names(task_dir)))
