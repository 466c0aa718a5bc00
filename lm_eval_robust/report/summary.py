"""The report's summary in the layout of the paper's Tables 3 and 5: per perturbation kind, the
mean and standard deviation across tasks of p_damage, p_recover, p_clean and p_combined for each
run against the first (Table 3), and the mean certification rates before and after (Table 5).

Means skip tasks where a value is undefined (e.g. p_recover without damage, certificates on tasks
with too few perturbations); each cell says over how many tasks it was taken.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from lm_eval_robust.report.markdown import FIT_LABELS, FIT_STATS, markdown_table


class Report(Protocol):
    """What the summary reads of :class:`lm_eval_robust.report.estimates.Report`."""

    @property
    def runs(self) -> Sequence[dict[str, Any]]: ...

    @property
    def tasks(self) -> Sequence[Any]: ...

    @property
    def pairs(self) -> Sequence[Any]: ...


__all__ = ["mean_std", "summary_markdown"]

TABLE3 = ("p_damage", "p_recover", "p_clean", "p_combined")
CERTS = ("p_c", "p_h", "P_c", "P_h")


def mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean and sample standard deviation of the finite values, and how many there were."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return math.nan, math.nan, 0
    std = float(np.std(v, ddof=1)) if v.size > 1 else math.nan
    return float(v.mean()), std, int(v.size)


def _fmt(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.1f}"


def _kinds(report: Report) -> list[str]:
    return sorted({t.kind for t in report.tasks})


def summary_markdown(report: Report) -> list[str]:
    """Markdown lines; empty when the report has no paired runs."""
    if not report.pairs:
        return []
    others = list(dict.fromkeys(p.other for p in report.pairs))
    base = report.runs[0]["label"]
    out = [
        "## Summary in the paper's layout (Tables 3 and 5)",
        "",
        f"Each run against **{base}**, paired by example; mean and standard deviation across the "
        "tasks of each perturbation kind (n: tasks where the value is defined).",
        "",
    ]
    header = ["kind", "metric"]
    for o in others:
        header += [f"{o}: mean", "std", "n"]
    rows = []
    by_key = {(t.run, t.task): t for t in report.tasks}
    for kind in _kinds(report):
        for name in TABLE3:
            row = [kind, name]
            for o in others:
                vals = [
                    p.metrics[name].value for p in report.pairs if p.other == o and p.kind == kind
                ]
                m, s, n = mean_std(vals)
                row += [_fmt(m), _fmt(s), str(n)]
            rows.append(row)
        for name in FIT_STATS:
            fit_cells: list[str] = []
            for o in others:
                got = [
                    by_key[(o, p.task)].fit.get(name)
                    for p in report.pairs
                    if p.other == o and p.kind == kind
                ]
                m, s, n = mean_std([float(v) for v in got if isinstance(v, int | float)])
                fit_cells += [_fmt(m), _fmt(s), str(n)]
            if any(c != "0" for c in fit_cells[2::3]):
                rows.append([kind, FIT_LABELS[name], *fit_cells])
    out += [*markdown_table(header, rows).splitlines(), ""]
    header = ["kind", "run", "p_C", "p_H", "p_C'", "p_H'", "P_C", "P_H", "P_C'", "P_H'", "n"]
    rows = []
    for kind in _kinds(report):
        for o in others:
            pairs = [p for p in report.pairs if p.other == o and p.kind == kind]
            # tasks where every rate is computable before and after (the same tasks per cell)
            ok = [
                p
                for p in pairs
                if all(
                    math.isfinite(by_key[(r, p.task)].metrics[c].value)
                    for c in CERTS
                    for r in (p.base, p.other)
                )
            ]
            cells: dict[tuple[str, str], str] = {}
            for c in CERTS:
                for side, run_of in (("", lambda p: p.base), ("'", lambda p: p.other)):
                    vals = [by_key[(run_of(p), p.task)].metrics[c].value for p in ok]
                    cells[(c, side)] = _fmt(mean_std(vals)[0])
            row = [kind, o]
            for group in (("p_c", "p_h"), ("P_c", "P_h")):
                row += [cells[(c, "")] for c in group] + [cells[(c, "'")] for c in group]
            rows.append([*row, str(len(ok))])
    out += [
        f"Certification (Table 5): mean over tasks where it is computable; unprimed = {base}, "
        "primed = the run; P_C/P_H are population certificates (Remark E.4), meant for "
        "`*_holdout` tasks.",
        "",
        *markdown_table(header, rows).splitlines(),
        "",
    ]
    return out
