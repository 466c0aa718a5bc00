"""Helpers shared by the benchmark scripts: the requests of one perturbed task, and predictions."""

from __future__ import annotations

from typing import Any


def task_requests(task: str, metadata: dict[str, Any], limit: int | None = None) -> list[Any]:
    """The harness's requests of one of our tasks, built exactly as ``lm_eval`` builds them."""
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    tm = TaskManager(
        include_path=lm_eval_robust.task_dir(), include_defaults=False, metadata=metadata
    )
    built = tm.load([task])["tasks"][task]
    built.build_all_requests(limit=limit or None, rank=0, world_size=1)
    return list(built.instances)


def top_labels(reqs: list[Any], out: list[tuple[float, bool]]) -> dict[int, frozenset[int]]:
    """Per doc, the set of labels with the highest log-likelihood (exact ties keep all)."""
    by_doc: dict[int, dict[int, float]] = {}
    for req, (ll, _) in zip(reqs, out, strict=True):
        by_doc.setdefault(req.doc_id, {})[req.idx] = ll
    tops = {}
    for doc, lls in by_doc.items():
        best = max(lls.values())
        tops[doc] = frozenset(k for k, v in lls.items() if v == best)
    return tops


def first_top_label(reqs: list[Any], out: list[tuple[float, bool]]) -> dict[int, int]:
    """Per doc, the first label with the highest log-likelihood (the harness's argmax)."""
    return {d: min(s) for d, s in top_labels(reqs, out).items()}
