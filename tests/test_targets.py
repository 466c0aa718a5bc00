"""Target-task selection on a synthetic run with known clean BAC and drops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report import _task_a, _task_b, _write_run

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli import main
from lm_eval_robust.report.targets import Criteria, candidates, read_task_list, target_tasks


def test_filters_and_ranking(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "r", {"ni065_format_pert": _task_a(False), "ni220_format_pert": _task_b(False)}
    )
    rows = {r.task: r for r in candidates(str(run), Criteria(), n_resamples=300)}
    a = rows["ni065_format_pert"]  # clean 100, perturbed 75: a target
    assert a.bac_clean == pytest.approx(1.0) and a.delta_drop == pytest.approx(-0.25)
    assert a.passes_clean and a.passes_drop and a.target and a.style == "plain"
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


def test_several_runs_make_one_table_and_a_task_twice_is_refused(tmp_path: Path) -> None:
    a = _write_run(tmp_path / "a", {"ni065_format_pert": _task_a(False)})
    b = _write_run(tmp_path / "b", {"ni220_format_pert": _task_b(False)})
    rows = candidates([str(a), str(b)], Criteria(), n_resamples=200)
    assert sorted(r.task for r in rows) == ["ni065_format_pert", "ni220_format_pert"]
    alone = {r.task: r for r in candidates(str(b), Criteria(), n_resamples=200)}
    both = {r.task: r for r in rows}
    assert both["ni220_format_pert"].delta_drop == alone["ni220_format_pert"].delta_drop
    c = _write_run(tmp_path / "c", {"ni065_format_pert": _task_a(False)})
    with pytest.raises(UserError, match=r"ni065_format_pert \(plain prompts\) is in both .* give"):
        candidates([str(a), str(c)], Criteria(), n_resamples=200)
    # the same task in the chat style is another row, not a clash
    (res,) = c.glob("*/results_*.json")
    res.write_text(json.dumps({**json.loads(res.read_text()), "chat_template": "<chat>"}))
    rows = candidates([str(a), str(c)], Criteria(), n_resamples=200)
    assert sorted((r.task, r.style) for r in rows) == [
        ("ni065_format_pert", "chat"),
        ("ni065_format_pert", "plain"),
    ]
    assert target_tasks(rows) == ["ni065_format_pert"]  # a target once, whatever its styles


def test_select_needs_runs_or_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["select"]) == 2
    assert "give either run folders or --pretrained MODEL" in capsys.readouterr().err


@pytest.mark.slow
def test_select_runs_the_screening_pass_itself(
    tiny_model_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sel" / "targets.json"
    md = json.dumps({"n_examples": 12, "n_perturbations": 2})
    argv = ["select", "--pretrained", str(tiny_model_dir), "--tasks", "ni1284_format_pert"]
    argv += ["--metadata", md, "--batch_size", "4", "--resamples", "200", "-o", str(out)]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    assert data["runs"] == [str(tmp_path / "sel" / "select_run")]
    (row,) = data["table"]
    assert row["task"] == "ni1284_format_pert" and row["n_variants"] == 2 * row["n_examples"]
    assert 0.0 <= row["bac_clean"] <= 1.0 and row["target"] == (
        row["passes_clean"] and row["passes_drop"]
    )
    # the pass is an ordinary lm_eval output folder, with samples, that select can read again
    again = candidates(data["runs"], Criteria(), n_resamples=200)
    assert again[0].bac_clean == pytest.approx(row["bac_clean"])


def test_task_lists_from_commas_or_targets_files(tmp_path: Path) -> None:
    assert read_task_list("ni065_format_pert, ni220_text_pert") == [
        "ni065_format_pert",
        "ni220_text_pert",
    ]
    good = tmp_path / "t.json"
    good.write_text(json.dumps({"targets": ["ni220_text_pert"], "table": []}))
    assert read_task_list(str(good)) == ["ni220_text_pert"]
    cases = {
        "missing.json": (None, "targets file .*missing.json not found; write it with select -o"),
        "bad.json": ("{not json", "not valid JSON"),
        "other.json": (json.dumps({"tasks": []}), "no 'targets' list"),
        "none.json": (json.dumps({"targets": []}), "no task passed the filters"),
    }
    for name, (text, message) in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(UserError, match=message):
            read_task_list(str(tmp_path / name))


def test_report_keeps_the_targets_and_their_splits(tmp_path: Path) -> None:
    run = _write_run(
        tmp_path / "r", {"ni065_format_pert": _task_a(False), "ni220_format_pert": _task_b(False)}
    )
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"targets": ["ni065_format_pert"]}))
    out = tmp_path / "rep"
    argv = ["report", str(run), "--tasks", str(targets), "--resamples", "200", "--no-plots"]
    assert main([*argv, "--quiet", "-o", str(out)]) == 0
    tasks = {t["task"] for t in json.loads((out / "report.json").read_text())["tasks"]}
    assert tasks == {"ni065_format_pert"}
    # the hold-out split of a target is the target's (its report reads the same targets file)
    hold = _write_run(
        tmp_path / "h",
        {"ni065_format_pert_holdout": _task_a(False), "ni220_format_pert": _task_b(False)},
    )
    assert main([*argv[:1], str(hold), *argv[2:], "--quiet", "-o", str(out)]) == 0
    tasks = {t["task"] for t in json.loads((out / "report.json").read_text())["tasks"]}
    assert tasks == {"ni065_format_pert_holdout"}


def test_significant_means_the_whole_ci_beyond_the_threshold(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "r", {"ni065_format_pert": _task_a(False)})
    (row,) = candidates(str(run), Criteria(), n_resamples=300)
    high = row.delta_drop_ci[1]
    assert row.delta_drop < -0.1 and row.passes_drop  # a clear drop, by its point value
    for min_drop, want in ((-high - 0.001, True), (-high + 0.01, False)):
        crit = Criteria(min_drop=min_drop, significant=True)
        (r,) = candidates(str(run), crit, n_resamples=300)
        assert r.passes_drop is want  # the CI's upper bound is held against the threshold
