"""The report's summary in the paper's Table 3 / Table 5 layout: means and standard deviations
across tasks of the paired metrics, computed from the same per-task values the report shows."""

from __future__ import annotations

import math
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from test_report import FAST, _runs

from lm_eval_robust.report.estimates import build_report
from lm_eval_robust.report.summary import mean_std, summary_markdown
from lm_eval_robust.report.tables import to_markdown
from lm_eval_robust.values import pairing


def test_mean_std_by_hand() -> None:
    assert mean_std([1.0, 2.0, 6.0]) == (3.0, pytest.approx(statistics.stdev([1, 2, 6])), 3)
    m, s, n = mean_std([4.0, math.nan])
    assert (m, n) == (4.0, 1) and math.isnan(s)
    m, s, n = mean_std([math.nan])
    assert n == 0 and math.isnan(m) and math.isnan(s)


def _cells(lines: list[str], first: str, second: str) -> list[str]:
    (row,) = [r for r in lines if r.startswith(f"| {first} | {second} |")]
    return [c.strip() for c in row.strip("|").split("|")]


def test_table3_and_table5_rows_match_the_per_task_values(tmp_path: Path) -> None:
    base, deb = _runs(tmp_path)
    report = build_report(pairing.label_runs([base, deb], ["base", "debiased"]), FAST)
    lines = summary_markdown(report)
    assert lines[0].startswith("## Summary in the paper's layout")
    for name in ("p_damage", "p_recover", "p_clean", "p_combined"):
        vals = [p.metrics[name].value for p in report.pairs if p.kind == "format"]
        finite = [v for v in vals if math.isfinite(v)]
        cells = _cells(lines, "format", name)
        assert float(cells[2]) == pytest.approx(sum(finite) / len(finite), abs=0.051)
        assert int(cells[4]) == len(finite)
    # Table 5: certificates are computable on ni220 (40 variants), not on ni065 (4 variants)
    t = {(s.run, s.task): s for s in report.tasks}
    assert math.isnan(t[("base", "ni065_format_pert")].metrics["p_h"].value)
    cells = _cells(lines, "format", "debiased")
    assert cells[-1] == "1"
    want = [
        t[(r, "ni220_format_pert")].metrics[c].value
        for r in ("base", "debiased")
        for c in ("p_c", "p_h")
    ]
    assert [float(c) for c in cells[2:6]] == pytest.approx(want, abs=0.051)
    assert "## Summary in the paper's layout" in to_markdown(report)


def test_single_run_has_no_summary(tmp_path: Path) -> None:
    base, _ = _runs(tmp_path)
    report = build_report(pairing.label_runs([base], ["base"]), FAST)
    assert summary_markdown(report) == []
    assert "Summary in the paper's layout" not in to_markdown(report)


def test_fit_radius_change_is_averaged_over_the_tasks_that_have_it(tmp_path: Path) -> None:
    base, deb = _runs(tmp_path)
    runs = pairing.label_runs([base, deb], ["base", "debiased"])
    lines = summary_markdown(build_report(runs, FAST))
    assert not any(r.startswith("| format | p_εV") for r in lines)
    fits = {"ni220_format_pert": {"p_eps_V": 40.0}, "ni065_format_pert": {"p_eps_V": 10.0}}
    runs[1] = replace(runs[1], fits=fits)
    report = build_report(runs, FAST)
    cells = _cells(summary_markdown(report), "format", "p_εV (train)")
    assert cells[2:] == ["25.0", f"{statistics.stdev([40.0, 10.0]):.1f}", "2"]
    assert not any("p_εL" in line for line in summary_markdown(report))
    assert {t.task: t.fit.get("p_eps_V") for t in report.tasks if t.run == "debiased"} == {
        "ni220_format_pert": 40.0,
        "ni065_format_pert": 10.0,
    }


def test_a_run_with_fewer_tasks_than_another(tmp_path: Path) -> None:
    """Each run is summarised over its own pairs; a task another run has does not matter."""
    base, deb = _runs(tmp_path)
    # a copy of the debiased run (the same folder twice is refused as one run given twice)
    one = tmp_path / "one"
    shutil.copytree(deb, one)
    runs = pairing.label_runs([base, deb, one], ["base", "all", "one"])
    only = sorted(runs[2].tasks)[0]
    runs[2] = replace(runs[2], tasks={only: runs[2].tasks[only]}, fits={only: {"p_eps_V": 7.0}})
    runs[1] = replace(runs[1], fits={t: {"p_eps_V": 40.0} for t in runs[1].tasks})
    lines = summary_markdown(build_report(runs, FAST))
    cells = _cells(lines, "format", "p_εV (train)")
    assert cells[2:] == ["40.0", "0.0", "2", "7.0", "–", "1"]
