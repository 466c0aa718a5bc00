"""Target-task selection on a synthetic run with known clean BAC and drops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report import _task_a, _task_b, _write_run

from lm_eval_robust.cli import main
from lm_eval_robust.select import Criteria, candidates


def test_filters_and_ranking(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "r", {"ni065_format_pert": _task_a(False), "ni220_format_pert": _task_b(False)}
    )
    rows = {r.task: r for r in candidates(str(run), Criteria(), n_resamples=300)}
    a = rows["ni065_format_pert"]  # clean 100, perturbed 75: a target
    assert a.bac_clean == pytest.approx(1.0) and a.delta_drop == pytest.approx(-0.25)
    assert a.passes_clean and a.passes_drop and a.target
    strict = {r.task: r for r in candidates(str(run), Criteria(min_clean_bac=1.01), 300)}
    assert not strict["ni065_format_pert"].target
    assert strict["ni065_format_pert"].distance(Criteria(min_clean_bac=1.01)) == pytest.approx(0.01)


def test_cli_writes_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _write_run(tmp_path / "r", {"ni065_format_pert": _task_a(False)})
    out = tmp_path / "sel" / "targets.json"
    assert main(["select", str(run), "--resamples", "200", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["targets"] == ["ni065_format_pert"]
    assert out.with_suffix(".md").read_text().startswith("# Target-task selection")
    assert "Targets: ni065_format_pert" in capsys.readouterr().out
