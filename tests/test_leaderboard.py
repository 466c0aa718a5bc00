"""``lm-eval-robust leaderboard``: one row per model over runs of several models."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from lm_eval_robust.cli import main as cli_main
from lm_eval_robust.report.leaderboard import MEAN, build_leaderboard
from lm_eval_robust.report.leaderboard_tables import to_markdown
from lm_eval_robust.values.pairing import label_runs

STAMP = "2025-01-01T00-00-00.000001"


def _sample(task: str, ex: str, pid: int, gold: int, ll: list[float], fmt: str) -> dict:
    item = {
        "task": task.split("_")[0],
        "example_id": ex,
        "pert_id": pid,
        "gold": gold,
        "pred": int(np.argmax(ll)),
        "ll": ll,
    }
    doc = {"task": item["task"], "kind": "format", "split": "test", "example_id": ex}
    doc |= {"gold": gold, "pert_id": pid, "format_id": "clean" if pid == 0 else fmt}
    # the per-doc value names no variant: older runs; the reader takes it from the doc
    return {"doc_id": 0, "doc": doc, "bac_clean": item, "bac_pert": item}


def _task(task: str, n: int, skill: float, seed: int) -> list[dict]:
    """``n`` examples x (clean + 4 formats); format f3 is hard; ``skill`` sets the margins."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n):
        gold = e % 2
        for pid in range(5):
            fmt = f"f{pid}"
            margin = skill + rng.normal(scale=1.0) - (1.5 if fmt == "f3" else 0.0)
            ll = [0.0, 0.0]
            ll[1 - gold] = -margin
            out.append(_sample(task, f"e{e}", pid, gold, ll, fmt))
    return out


def _write_run(root: Path, model: str, skill: float) -> Path:
    folder = root / model / "model"
    folder.mkdir(parents=True)
    tasks = {
        t: _task(t, 24, skill, seed=i) for i, t in enumerate(("ni065_format_lb", "ni220_format_lb"))
    }
    configs = {
        t: {
            "task": t,
            "dataset_kwargs": {"lmer_task": t.split("_")[0], "lmer_kind": "format"},
            "metadata": {"n_examples": 70, "n_perturbations": 4, "design": "crossed"},
        }
        for t in tasks
    }
    results = {"results": {t: {} for t in tasks}, "configs": configs, "config": {}}
    (folder / f"results_{STAMP}.json").write_text(json.dumps(results))
    for t, lines in tasks.items():
        (folder / f"samples_{t}_{STAMP}.jsonl").write_text(
            "".join(json.dumps(s) + "\n" for s in lines)
        )
    return root / model


def test_one_row_per_model_with_means_and_intervals(tmp_path: Path) -> None:
    weak = _write_run(tmp_path, "weak", skill=0.3)
    strong = _write_run(tmp_path, "strong", skill=2.0)
    lb = build_leaderboard(label_runs([weak, strong], None), n_resamples=500)
    assert lb.models == ("weak", "strong") and lb.kinds == ("format",)
    for model in lb.models:
        mean = lb.row(model, "format")
        tasks = [r for r in lb.rows if r.model == model and r.task != MEAN]
        assert mean is not None and mean.n_tasks == 2 and mean.n_examples == 48
        for name in ("bac_clean", "bac_pert", "bac_worst", "consistency", "fmt_spread"):
            avg = np.mean([r.cells[name].value for r in tasks])
            assert mean.cells[name].value == pytest.approx(avg), name
        for name in ("bac_pert", "delta_drop", "consistency"):
            c = mean.cells[name]
            assert c.low <= c.value <= c.high, name
        # the hard format is the worst variant of every task
        for r in tasks:
            assert min(r.variants, key=r.variants.__getitem__) == "f3"
            assert r.cells["fmt_worst"].value == pytest.approx(r.variants["f3"])
        # a mean over two tasks' examples is tighter than either task alone
        width = mean.cells["bac_pert"].high - mean.cells["bac_pert"].low
        assert all(width < r.cells["bac_pert"].high - r.cells["bac_pert"].low for r in tasks)
    strong_row, weak_row = lb.row("strong", "format"), lb.row("weak", "format")
    assert strong_row is not None and weak_row is not None
    assert strong_row.cells["bac_pert"].value > weak_row.cells["bac_pert"].value
    worst = strong_row.cells["bac_worst"]
    assert worst.low <= worst.value <= worst.high <= strong_row.cells["bac_pert"].high
    assert weak_row.cells["bac_worst"].value < worst.value
    md = to_markdown(lb)
    table = md.split("## format perturbations")[1]
    assert table.index("| strong |") < table.index("| weak |")  # ranked by perturbed BAC


def test_cli_writes_markdown_csv_json_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [_write_run(tmp_path, m, s) for m, s in (("a", 0.5), ("b", 1.5))]
    out = tmp_path / "lb"
    rc = cli_main(["leaderboard", *map(str, runs), "-o", str(out), "--resamples", "200"])
    assert rc == 0
    assert "# Robustness leaderboard" in capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text())))
    means = [r for r in rows if r["task"] == MEAN]
    assert {r["model"] for r in means} == {"a", "b"}
    assert all(float(r["bac_pert_low"]) <= float(r["bac_pert"]) for r in means)
    doc = json.loads((out / "leaderboard.json").read_text())
    assert doc["designs"] == {"ni065_format_lb": "crossed", "ni220_format_lb": "crossed"}
    first = next(r for r in doc["rows"] if r["task"] != MEAN)
    assert set(first["variant_bac"]) == {"f1", "f2", "f3", "f4"}
    for png in ("leaderboard_bac.png", "leaderboard_variants.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_refuses_a_run_without_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _write_run(tmp_path, "a", 1.0)
    for f in run.rglob("samples_*"):
        f.unlink()
    rc = cli_main(["leaderboard", str(run), "-o", str(tmp_path / "lb")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--log_samples" in err[0]


def test_means_are_over_the_tasks_every_model_ran(tmp_path: Path) -> None:
    full = _write_run(tmp_path, "full", skill=1.0)
    part = _write_run(tmp_path, "part", skill=1.0)
    for f in part.rglob("*ni220_format_lb*"):
        f.unlink()
    results = next(part.rglob("results_*.json"))
    doc = json.loads(results.read_text())
    for key in ("results", "configs"):
        doc[key].pop("ni220_format_lb")
    results.write_text(json.dumps(doc))
    lb = build_leaderboard(label_runs([full, part], None), n_resamples=200)
    full_mean, full_065 = lb.row("full", "format"), lb.row("full", "format", "ni065_format_lb")
    assert full_mean is not None and full_065 is not None and full_mean.n_tasks == 1
    assert full_mean.cells["bac_pert"].value == pytest.approx(full_065.cells["bac_pert"].value)
    assert lb.row("full", "format", "ni220_format_lb") is not None  # still listed per task
    assert any("full, format: the mean leaves out ni220" in n for n in lb.notes)


def test_runs_at_different_settings_get_a_note(tmp_path: Path) -> None:
    a = _write_run(tmp_path, "a", skill=1.0)
    b = _write_run(tmp_path, "b", skill=1.0)
    results = next(b.rglob("results_*.json"))
    doc = json.loads(results.read_text())
    for config in doc["configs"].values():
        config["metadata"]["n_perturbations"] = 8
    results.write_text(json.dumps(doc))
    lb = build_leaderboard(label_runs([a, b], None), n_resamples=200)
    assert any("differ in n_perturbations (a: 4; b: 8)" in n for n in lb.notes)
    same = build_leaderboard(label_runs([a, _write_run(tmp_path, "c", 1.0)], None), 200)
    assert not any("differ in" in n for n in same.notes)


def test_docs_with_different_numbers_of_choices_get_no_certificate(tmp_path: Path) -> None:
    """A task whose docs have 2 or 3 choices (BIG-bench's date_understanding has 5 or 6) has no
    one label margin: its certificates are n/a with a note, and the rest of its row stands."""
    run = _write_run(tmp_path, "m", skill=1.0)
    path = next((run / "model").glob("samples_ni065_format_lb_*.jsonl"))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for s in lines:
        if s["doc"]["example_id"] in ("e0", "e1"):
            for key in ("bac_clean", "bac_pert"):
                s[key]["ll"] = [*s[key]["ll"], -9.0]
    path.write_text("".join(json.dumps(s) + "\n" for s in lines))
    lb = build_leaderboard(label_runs([run], None), n_resamples=200, n_splits=5)
    (row,) = [r for r in lb.rows if r.task == "ni065_format_lb"]
    assert row.certs == {} and row.cells["bac_pert"].value == row.cells["bac_pert"].value
    (other,) = [r for r in lb.rows if r.task == "ni220_format_lb"]
    assert other.certs
    assert any("ni065_format_lb: certificates n/a" in n and "(2, 3)" in n for n in lb.notes)
    from lm_eval_robust.report.cert_report import certificate_summaries

    items = [s["bac_pert"] for s in lines]
    assert certificate_summaries(items) == {}


def test_chance_level_per_task_and_over_tasks(tmp_path: Path) -> None:
    """The figures' chance line: a uniform random pick's score, 1/2 on the binary task, the mean
    of 1/labels over clean prompts where some docs have three labels, the mean of the two over
    tasks; never 50 % where a task has more labels."""
    run = _write_run(tmp_path, "m", skill=1.0)
    path = next((run / "model").glob("samples_ni065_format_lb_*.jsonl"))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    three = {f"e{e}" for e in range(6)}  # 6 of 24 examples with a third label
    for s in lines:
        if s["doc"]["example_id"] in three:
            for key in ("bac_clean", "bac_pert"):
                s[key]["ll"] = [*s[key]["ll"], -9.0]
    path.write_text("".join(json.dumps(s) + "\n" for s in lines))
    lb = build_leaderboard(label_runs([run], None), n_resamples=200, n_splits=5)
    rows = {r.task: r for r in lb.rows}
    assert rows["ni220_format_lb"].chance == pytest.approx(0.5)
    mixed = (18 / 2 + 6 / 3) / 24
    assert rows["ni065_format_lb"].chance == pytest.approx(mixed)
    assert rows[MEAN].chance == pytest.approx((0.5 + mixed) / 2)


def test_variant_figure_labels_wrapped_tasks_by_their_own_names() -> None:
    from lm_eval_robust.report.leaderboard_plots import _short

    assert _short("bigbench_date_understanding_multiple_choice_robust_text") == (
        "date_understanding"
    )
    assert _short("bigbench_navigate_multiple_choice_robust_format_test") == "navigate"
    assert _short("gsm8k_robust_format") == "gsm8k"
    assert _short("ni065_format_pert") == "ni065"


def test_a_format_task_whose_prompts_fell_back_to_text_leaves_the_format_mean(
    tmp_path: Path,
) -> None:
    """A wrapped prompt whose parts cannot be found gets text perturbations: a "format" task
    made only of those keeps its row but leaves the format mean, with a note; one made partly of
    them stays in, with the share said."""
    run = _write_run(tmp_path, "m", skill=1.0)
    for task, kinds in (
        ("ni065_format_lb", ("zero_width", "typo")),
        ("ni220_format_lb", ("typo",)),
    ):
        path = next((run / "model").glob(f"samples_{task}_*.jsonl"))
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        for s in lines:
            pid = s["doc"]["pert_id"]
            if pid > 0 and (task == "ni065_format_lb" or pid == 1):
                s["doc"]["format_id"] = kinds[pid % len(kinds)]
        path.write_text("".join(json.dumps(s) + "\n" for s in lines))
    lb = build_leaderboard(label_runs([run], None), n_resamples=200, n_splits=5)
    mean = lb.row("m", "format")
    assert mean is not None and mean.n_tasks == 1
    only = lb.row("m", "format", "ni220_format_lb")
    assert only is not None and mean.cells["bac_pert"].value == only.cells["bac_pert"].value
    assert lb.row("m", "format", "ni065_format_lb") is not None  # its row stands
    assert any(
        "ni065_format_lb: no prompt parts were found" in n and "left out of the format means" in n
        for n in lb.notes
    )
    assert any("ni220_format_lb: 25 % of its perturbed prompts are text" in n for n in lb.notes)


def test_spreads_are_na_with_one_perturbed_prompt_per_example(tmp_path: Path) -> None:
    """K = 1 (nested): each variant is scored on other examples, and permuting variant labels
    within examples changes nothing, so a spread cannot be told from noise: best, median, worst
    and spread are n/a (not a p-value of 1), with a note; the drop and the rest stand."""
    run = _write_run(tmp_path, "m", skill=1.0)
    for path in (run / "model").glob("samples_*.jsonl"):
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        keep = [s for s in lines if s["doc"]["pert_id"] <= 1]
        for e, s in enumerate(keep):  # each example its own format
            if s["doc"]["pert_id"] == 1:
                s["doc"]["format_id"] = f"f{e % 3}"
        path.write_text("".join(json.dumps(s) + "\n" for s in keep))
    lb = build_leaderboard(label_runs([run], None), n_resamples=200, n_splits=5)
    for r in lb.rows:
        for name in ("fmt_best", "fmt_median", "fmt_worst", "fmt_spread"):
            assert np.isnan(r.cells[name].value), (r.task, name)
        assert r.spread is not None and np.isnan(r.spread.p_value())
        assert np.isfinite(r.cells["delta_drop"].value)
    assert any("spread are n/a" in n and "K >= 2" in n for n in lb.notes)
    assert "n/a" in to_markdown(lb) or "–" in to_markdown(lb)
