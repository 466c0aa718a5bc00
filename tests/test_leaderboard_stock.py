"""The leaderboard's columns in a wrapped stock task's own metric (lm-eval's ``acc``), checked
against the per-prompt values the committed BIG-bench runs logged, read here straight from the
samples files."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_leaderboard import _write_run
from test_leaderboard_page import CHROMIUM_FLAGS, _chromium

from lm_eval_robust.cli import main as cli_main
from lm_eval_robust.report.leaderboard import MEAN, build_leaderboard
from lm_eval_robust.report.leaderboard_html import to_html
from lm_eval_robust.report.leaderboard_tables import to_csv, to_json, to_markdown
from lm_eval_robust.values.pairing import Run, label_runs

ROOT = Path(__file__).resolve().parents[1] / "results" / "wrap_bigbench"
MODELS = ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-0.5b-instruct")


def _runs(task: str, models: tuple[str, ...] = MODELS) -> list[Run]:
    return label_runs([ROOT / task / "runs" / m for m in models], None)


def _logged(run: Run, task: str) -> dict[str, dict[int, float]]:
    """example -> pert_id -> the logged ``stock_acc`` value, from the samples file itself."""
    folder = run.results_file.parent
    (file,) = folder.glob(f"samples_{task}_*.jsonl.gz")
    out: dict[str, dict[int, float]] = {}
    with gzip.open(file, "rt", encoding="utf-8") as fh:
        for line in fh:
            v = json.loads(line)["stock_acc_clean"]
            out.setdefault(str(v["example_id"]), {})[int(v["pert_id"])] = float(v["value"])
    return out


def _expected(values: dict[str, dict[int, float]]) -> dict[str, float]:
    clean = [p[0] for p in values.values()]
    pert = [x for p in values.values() for k, x in p.items() if k > 0]
    worst = [min(p.values()) for p in values.values()]
    c, q = float(np.mean(clean)), float(np.mean(pert))
    return {"clean": c, "pert": q, "drop": q - c, "worst": float(np.mean(worst))}


@pytest.fixture(scope="module")
def navigate():  # type: ignore[no-untyped-def]
    runs = _runs("navigate")
    lb = build_leaderboard(runs, n_resamples=400, n_splits=3, n_permutations=100)
    return runs, lb


def test_stock_columns_are_the_mean_of_the_logged_values_with_intervals_around(
    navigate,  # type: ignore[no-untyped-def]
) -> None:
    runs, lb = navigate
    moved = 0
    for run in runs:
        data = json.loads(run.results_file.read_text(encoding="utf-8"))
        for task in run.tasks:
            row = lb.row(run.label, run.tasks[task].kind, task)
            assert row is not None and set(row.stock) == {"acc"}
            sc = row.stock["acc"]
            assert (sc.metric, sc.filter, sc.listed, sc.n_tasks) == ("acc", "none", ("acc",), 1)
            want = _expected(_logged(run, task))
            for stat, value in want.items():
                cell = sc.cells[stat]
                assert cell.value == pytest.approx(value, abs=1e-12), (run.label, task, stat)
                if math.isfinite(cell.low):
                    assert cell.low <= cell.value <= cell.high
                    moved += 1
            # the same numbers lm-eval's own aggregation wrote into the results JSON
            res = data["results"][task]
            for stat in ("clean", "pert", "drop", "worst"):
                assert sc.cells[stat].value == pytest.approx(res[f"stock_acc_{stat},none"])
            # one task per kind: the mean row is that task's row
            mean = lb.row(run.label, run.tasks[task].kind)
            assert mean is not None and mean.stock["acc"].n_tasks == 1
            for stat in want:
                assert mean.stock["acc"].cells[stat].value == pytest.approx(want[stat])
    assert moved > 10  # most cells have a real interval (70 % clean acc on 10 examples)


def test_stock_columns_in_every_output(navigate) -> None:  # type: ignore[no-untyped-def]
    _, lb = navigate
    md = to_markdown(lb)
    header = next(line for line in md.splitlines() if line.startswith("| model | tasks |"))
    assert "| acc clean | acc perturbed | acc drop | acc worst-case | clean BAC |" in header
    assert "the task's own metric as lm-eval computes it" in md
    assert "## Model comparisons in the task's own metric (acc)" in md
    rows = list(csv.DictReader(io.StringIO(to_csv(lb))))
    gemma_text = next(
        r
        for r in rows
        if r["model"] == "gemma-3-270m" and r["kind"] == "text" and r["task"] == MEAN
    )
    assert float(gemma_text["stock_acc_drop"]) == pytest.approx(0.05)
    assert gemma_text["stock_acc_tasks"] == "1"
    doc = json.loads(to_json(lb))
    assert all(set(r["stock"]) == {"acc"} for r in doc["rows"])
    assert set(doc["stock_comparison"]) == {"acc"}
    drops = [p for p in doc["stock_comparison"]["acc"]["pairs"] if p["measure"] == "drop"]
    assert len(drops) == 2 * 3  # two kinds, three model pairs
    page = to_html(lb)
    assert ">acc clean</th>" in page and ">acc drop</th>" in page
    assert 'id="comparisons-stock-0"' in page


def test_mean_rows_average_only_tasks_of_the_same_metric() -> None:
    nav, sports = _runs("navigate", MODELS[:2]), _runs("sports_understanding", MODELS[:2])
    both = [replace(a, tasks={**a.tasks, **b.tasks}) for a, b in zip(nav, sports, strict=True)]
    lb = build_leaderboard(both, n_resamples=200, n_splits=3, n_permutations=50)
    for m in lb.models:
        tasks = [r for r in lb.rows if r.model == m and r.kind == "text" and r.task != MEAN]
        mean = lb.row(m, "text")
        assert mean is not None and len(tasks) == 2 and mean.stock["acc"].n_tasks == 2
        for stat in ("clean", "pert", "drop", "worst"):
            want = np.mean([r.stock["acc"].cells[stat].value for r in tasks])
            assert mean.stock["acc"].cells[stat].value == pytest.approx(want)
    # the same tasks, one reporting another metric: each metric's mean is its own task's value
    other = []
    for run in both:
        task = next(t for t in run.tasks if "sports" in t and t.endswith("_text"))
        tr = run.tasks[task]
        assert tr.stock is not None
        moved = replace(tr.stock, metric="exact_match", filter="strict-match")
        other.append(replace(run, tasks={**run.tasks, task: replace(tr, stock=moved)}))
    lb = build_leaderboard(other, n_resamples=200, n_splits=3, n_permutations=50)
    for m in lb.models:
        mean = lb.row(m, "text")
        assert mean is not None
        assert list(mean.stock) == ["acc", "exact_match (strict-match)"]
        for label in mean.stock:
            (task_row,) = [
                r
                for r in lb.rows
                if r.model == m and r.kind == "text" and r.task != MEAN and label in r.stock
            ]
            assert mean.stock[label].n_tasks == 1
            assert (
                mean.stock[label].cells["clean"].value == task_row.stock[label].cells["clean"].value
            )
    md = to_markdown(lb)
    assert "exact_match (strict-match) clean" in md
    assert "the acc columns average the 1 of 2 tasks whose own metric is acc" in md
    rows = list(csv.DictReader(io.StringIO(to_csv(lb))))
    assert "stock_exact_match_clean,strict-match" in rows[0]


def test_our_own_tasks_get_no_stock_columns(tmp_path: Path) -> None:
    runs = [_write_run(tmp_path, m, s) for m, s in (("weak", 0.3), ("strong", 2.5))]
    lb = build_leaderboard(label_runs(runs, None), n_resamples=200, n_splits=3, n_permutations=50)
    assert all(not r.stock for r in lb.rows) and not lb.stock_comparison
    assert "task's own metric" not in to_markdown(lb)
    assert "stock" not in to_csv(lb) and "stock" not in to_json(lb)
    assert "stock" not in to_html(lb)


def test_page_with_stock_columns_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("LM_EVAL_ROBUST_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium not found; install it: apt-get install chromium")
        pytest.skip("chromium not installed (apt-get install chromium); .ci/run installs it")
    out = tmp_path / "lb"
    runs = [str(ROOT / "navigate" / "runs" / m) for m in MODELS]
    rc = cli_main(
        ["leaderboard", *runs, "-o", str(out), "--resamples", "200", "--splits", "3",
         "--permutations", "50", "--no_plots", "--quiet"]
    )  # fmt: skip
    assert rc == 0
    page = out / "leaderboard.html"
    cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*cmd, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert 'data-ready="1"' in dom
    table = re.search(r'<table class="sortable leaderboard" id="lb-text">(.*?)</table>', dom, re.S)
    assert table is not None
    head, body = table.group(1).split("<tbody>")
    assert head.index(">acc clean<") < head.index(">acc drop<") < head.index(">clean BAC<")
    gemma = next(tr for tr in body.split("<tr>") if "gemma-3-270m" in tr)
    cells = re.findall(r'<td[^>]*data-v="([^"]*)"', gemma)
    # model, tasks, then acc clean, perturbed, drop, worst-case (in %) before the BAC columns
    assert [float(v) for v in cells[2:6]] == pytest.approx([70.0, 75.0, 5.0, 70.0])
    assert gemma.count("<svg") >= 4


GEN_TASK = "gsm8k_robust_text"
GEN_STATS = ("clean", "pert", "drop", "worst", "consistency", "spread")


def _write_gen_run(root: Path, model: str, skill: float, seed: int) -> tuple[Path, dict]:
    """A wrapped generate_until run as lm-eval logs it: per doc one line per filter, each with
    the stock task's exact_match under every ``stock_exact_match_<stat>``; no label scores."""
    rng = np.random.default_rng(seed)
    folder = root / model / model
    folder.mkdir(parents=True)
    stamp = "2026-01-01T00-00-00"
    values: dict[str, dict[tuple[str, int], float]] = {"strict-match": {}, "flexible-extract": {}}
    lines = []
    for ex in range(12):
        for pid in range(4):
            variant = "clean" if pid == 0 else ("typo", "markup", "confusable")[pid - 1]
            for flt, p in (("strict-match", skill), ("flexible-extract", min(1.0, skill + 0.3))):
                value = float(rng.random() < p)
                values[flt][(str(ex), pid)] = value
                item = {
                    "task": GEN_TASK,
                    "example_id": str(ex),
                    "pert_id": pid,
                    "variant": variant,
                    "value": value,
                }
                names = [f"stock_exact_match_{s}" for s in GEN_STATS]
                lines.append({"doc_id": 4 * ex + pid, "filter": flt, "metrics": names,
                              **dict.fromkeys(names, item)})  # fmt: skip
    with (folder / f"samples_{GEN_TASK}_{stamp}.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in lines)
    results = {
        "results": {GEN_TASK: {}},
        "configs": {GEN_TASK: {"metadata": {"lmer_kind": "text", "design": "crossed"}}},
        "higher_is_better": {
            GEN_TASK: {f"stock_exact_match_{s}": s != "spread" for s in GEN_STATS}
        },
        "config": {"model_args": f"pretrained={model}"},
    }
    (folder / f"results_{stamp}.json").write_text(json.dumps(results), encoding="utf-8")
    return root / model, values


def test_generate_until_tasks_show_their_first_filter(tmp_path: Path) -> None:
    made = [_write_gen_run(tmp_path, m, s, i) for i, (m, s) in enumerate((("a", 0.3), ("b", 0.8)))]
    # without stock_only (report, plan) such a task is left out as before
    with pytest.raises(Exception, match="no task with lm-eval-robust per-doc samples"):
        label_runs([made[0][0]], None)
    runs = label_runs([p for p, _ in made], None, stock_only=True)
    lb = build_leaderboard(runs, n_resamples=400, n_splits=3, n_permutations=50)
    label = "exact_match (strict-match)"
    for run, (_, values) in zip(runs, made, strict=True):
        row = lb.row(run.label, "text", GEN_TASK)
        assert row is not None and list(row.stock) == [label]
        sc = row.stock[label]
        assert sc.listed == ("exact_match",) and sc.filter == "strict-match"
        strict = values["strict-match"]
        per_ex = {e: {p: v for (x, p), v in strict.items() if x == e} for e, _ in strict}
        want = _expected(per_ex)
        for stat, value in want.items():
            cell = sc.cells[stat]
            assert cell.value == pytest.approx(value), stat
            if math.isfinite(cell.low):
                assert cell.low <= cell.value <= cell.high
        # the flexible-extract values differ: the columns are the first filter's
        flex = np.mean([v for (_, p), v in values["flexible-extract"].items() if p == 0])
        assert flex != pytest.approx(sc.cells["clean"].value)
        assert math.isnan(row.cells["bac_clean"].value)
        mean = lb.row(run.label, "text")
        assert mean is not None and mean.n_tasks == 1
        assert mean.stock[label].cells["drop"].value == pytest.approx(want["drop"])
    assert set(lb.stock_comparison) == {label}
    md = to_markdown(lb)
    assert f"| {label} clean | {label} perturbed | {label} drop |" in md
    assert "stock_exact_match_clean,strict-match" in to_csv(lb)
    assert "exact_match (strict-match) clean" in to_html(lb)
    # beside a multiple-choice task of the same kind: each metric averaged over its own tasks
    nav = _runs("navigate", MODELS[:2])
    mixed = [replace(n, stock_only=g.stock_only) for n, g in zip(nav, runs, strict=True)]
    lb2 = build_leaderboard(mixed, n_resamples=200, n_splits=3, n_permutations=50)
    for run, gen in zip(mixed, runs, strict=True):
        mean = lb2.row(run.label, "text")
        assert mean is not None and mean.n_tasks == 2
        assert list(mean.stock) == ["acc", label]
        assert mean.stock["acc"].n_tasks == mean.stock[label].n_tasks == 1
        alone = lb.row(gen.label, "text", GEN_TASK)
        assert alone is not None
        assert mean.stock[label].cells["clean"].value == alone.stock[label].cells["clean"].value
        bac = lb2.row(run.label, "text", next(t for t in run.tasks if t.endswith("_text")))
        assert bac is not None
        assert mean.cells["bac_pert"].value == bac.cells["bac_pert"].value  # BAC: MC task only
    assert any("the task's own metric only (no label scores)" in n for n in lb2.notes)


def test_leaderboard_command_reads_a_generate_until_run(tmp_path: Path) -> None:
    runs = [str(_write_gen_run(tmp_path, m, s, i)[0]) for i, (m, s) in enumerate((("a", 0.3),))]
    out = tmp_path / "lb"
    rc = cli_main(
        ["leaderboard", *runs, "-o", str(out), "--resamples", "200", "--splits", "3",
         "--permutations", "50", "--quiet"]
    )  # fmt: skip
    assert rc == 0
    assert "exact_match (strict-match) clean" in (out / "leaderboard.md").read_text()
    assert (out / "leaderboard_bac.png").exists()


def test_a_task_with_several_metrics_shows_the_first_and_says_so() -> None:
    runs = []
    for run in _runs("navigate", MODELS[:2]):
        task = next(t for t in run.tasks if t.endswith("_text"))
        tr = run.tasks[task]
        assert tr.stock is not None
        both = replace(tr.stock, listed=("acc", "acc_norm"))
        runs.append(replace(run, tasks={**run.tasks, task: replace(tr, stock=both)}))
    lb = build_leaderboard(runs, n_resamples=200, n_splits=3, n_permutations=50)
    assert lb.stock_labels() == ("acc",)
    md = to_markdown(lb)
    assert (
        "Tasks reporting several metrics show the first lm-eval lists: "
        "bigbench_navigate_multiple_choice_robust_text: acc (of acc, acc_norm)." in md
    )
    assert "acc_norm clean" not in md
    doc = json.loads(to_json(lb))
    text = [r for r in doc["rows"] if r["task"].endswith("_text")]
    assert text and all(r["stock"]["acc"]["listed"] == ["acc", "acc_norm"] for r in text)
