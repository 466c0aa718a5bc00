"""Metrics over complete examples only.

An example is complete when it has its clean prompt (``pert_id == 0``) and every perturbation
round the run completed: a round (one perturbation id) counts only when every example with a
clean prompt has it. Docs are ordered round by round, so a ``--limit`` that cuts a round leaves
that round on some examples only; scoring them would compare the clean prompts of all examples
with the perturbed prompts of a few. Such docs, and examples without a clean prompt, are left
out and counted (one warning per task); when no perturbation round is complete, a one-line error
says how to choose ``--limit``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from lm_eval_robust.base.errors import UserError

log = logging.getLogger(__name__)
_warned: set[tuple[Any, ...]] = set()


class IncompleteRunError(UserError):
    """Perturbed docs of which no round is complete (a --limit that cuts the first round)."""


def complete_items(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``items`` of complete examples only (de-duplicated by task, example and perturbation)."""
    unique: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for it in items:
        unique[(str(it.get("task", "")), str(it["example_id"]), int(it["pert_id"]))] = it
    by_task: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for task, ex, pid in unique:
        by_task[task][ex].add(pid)
    keep: set[tuple[str, str, int]] = set()
    for task, examples in by_task.items():
        clean = [e for e, pids in examples.items() if 0 in pids]
        if not clean:  # no clean prompt at all: nothing to complete against, left as given
            keep |= {(task, e, p) for e, pids in examples.items() for p in pids}
            continue
        rounds = sorted({p for pids in examples.values() for p in pids if p > 0})
        full = [r for r in rounds if all(r in examples[e] for e in clean)]
        if rounds and not full:
            n_docs = sum(len(p) for p in examples.values())
            n = len(clean)
            raise IncompleteRunError(
                f"{task or 'task'}: no example is complete ({n_docs} docs: {len(clean)} clean "
                f"prompts and perturbation round(s) {rounds[:3]} on only some examples, as a "
                f"--limit that cuts a round leaves them); use --limit {2 * n} or another multiple "
                f"of {n} (whole rounds of {n} examples), or lower n_examples / n_perturbations"
            )
        wanted = {0, *full}
        kept = {(task, e, p) for e in clean for p in examples[e] if p in wanted}
        keep |= kept
        dropped = sum(len(p) for p in examples.values()) - len(kept)
        if dropped:
            lacking = len(examples) - len(clean)
            partial = sorted(set(rounds) - set(full))
            key = (task, len(kept), dropped)
            if key not in _warned:
                _warned.add(key)
                log.warning(
                    "%s: %d docs of incomplete examples left out (%d examples without a clean "
                    "prompt; round(s) %s only on some examples); metrics use %d examples x %d "
                    "prompts; choose --limit as a multiple of %d",
                    task or "task",
                    dropped,
                    lacking,
                    partial[:5],
                    len(clean),
                    len(wanted),
                    max(len(clean), 1),
                )
    return [unique[k] for k in sorted(unique) if k in keep]
