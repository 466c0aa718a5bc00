"""Paired clustered intervals of a generation layer sweep (``report.generation.sweep``)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from lm_eval_robust.report.generation.sweep import (
    SweepError,
    main,
    paired_rows,
    read_samples,
    render,
)

TASK = "triviaqa_text_pert"
PERT_CHANGES: dict[Path, int] = {}  # perturbed generations the synthetic L7 run changes


def _write_run(folder: Path, clean: list[float], pert: list[list[float]], gz: bool = False) -> None:
    """A harness-shaped samples file: clean docs first, then the perturbation rounds."""
    (folder / "model").mkdir(parents=True)
    lines: list[str] = []
    for pid in range(len(pert[0]) + 1):
        for ex, c in enumerate(clean):
            v = c if pid == 0 else pert[ex][pid - 1]
            item = {"task": "triviaqa", "example_id": str(ex), "pert_id": pid, "scores": {"em": v}}
            doc = {"example_id": str(ex), "pert_id": pid}
            rec = {"doc_id": len(lines), "doc": doc, "filtered_resps": [f"answer {v:g}"]}
            lines.append(json.dumps({**rec, "em_clean": item, "em_pert": item}))
    name = f"samples_{TASK}_2026-11-25T10-00-00.123456.jsonl"
    text = "\n".join(lines) + "\n"
    if gz:
        with gzip.open(folder / "model" / (name + ".gz"), "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        (folder / "model" / name).write_text(text, encoding="utf-8")


def _sweep(tmp_path: Path) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(3)
    n = 40
    c0 = (rng.random(n) < 0.6).astype(float)
    p0 = np.stack([c0 * (rng.random(n) < 0.6), c0 * (rng.random(n) < 0.7)], axis=1)
    c1 = c0.copy()
    c1[:3] = 1 - c1[:3]
    p1 = np.maximum(p0, (rng.random((n, 2)) < 0.2).astype(float))
    _write_run(tmp_path / "runs" / "base", list(c0), p0.tolist())
    _write_run(tmp_path / "runs" / "L7" / "x", list(c1), p1.tolist())
    PERT_CHANGES[tmp_path] = int(np.sum(p0 != p1))
    return tmp_path, np.column_stack([c0, p0.mean(1), c1, p1.mean(1)]) * 100


def test_read_samples_sums_and_counts_each_examples_perturbations(tmp_path: Path) -> None:
    _write_run(tmp_path / "r", [1.0, 0.0], [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    got = read_samples(tmp_path / "r", TASK, "em")
    assert got == {"0": (1.0, 1.0, 3), "1": (0.0, 1.0, 3)}
    assert read_samples(tmp_path / "r", "nq_open_text_pert", "em") == {}
    _write_run(tmp_path / "z", [1.0, 0.0], [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], gz=True)
    assert read_samples(tmp_path / "z", TASK, "em") == read_samples(tmp_path / "r", TASK, "em")


def test_paired_rows_match_hand_computed_means(tmp_path: Path) -> None:
    folder, m = _sweep(tmp_path)
    rows = paired_rows(folder, n_resamples=2000)
    base, layer = rows
    assert (base.label, layer.label) == ("base", "L7")
    c0, p0, c1, p1 = m.mean(axis=0)
    assert base.clean.value == pytest.approx(c0)
    assert base.pert.value == pytest.approx(p0)
    assert base.drop.value == pytest.approx(p0 - c0)
    assert layer.drop.value == pytest.approx(p1 - c1)
    assert layer.delta_clean is not None and layer.gain is not None and layer.p_recover
    assert layer.delta_clean.value == pytest.approx(c1 - c0)
    assert layer.gain.value == pytest.approx(p1 - p0)
    assert layer.p_recover.value == pytest.approx(100 * (p1 - p0) / (c0 - p0))
    # generations differ exactly where the synthetic score differs
    n_diff = int(np.sum(m[:, 0] != m[:, 2])) + PERT_CHANGES[tmp_path]
    assert layer.changed == (n_diff, 40 * 3)
    for cell in (base.clean, base.drop, layer.gain):
        assert cell.low <= cell.value <= cell.high
    # the MDE is 2.80 standard errors of the per-example differences
    diff = m[:, 3] - m[:, 1]
    se = np.std(diff, ddof=1) / math.sqrt(len(diff))
    assert layer.gain.mde == pytest.approx(2.8016 * se, rel=1e-3)
    # pairing: the gain's interval is narrower than the unpaired one would be
    unpaired = math.sqrt(np.var(m[:, 3], ddof=1) / 40 + np.var(m[:, 1], ddof=1) / 40)
    assert (layer.gain.high - layer.gain.low) < 2 * 1.96 * unpaired


def test_same_seed_same_intervals_and_no_drop_means_no_recovery(tmp_path: Path) -> None:
    folder, _ = _sweep(tmp_path)
    a = paired_rows(folder, n_resamples=500, seed=4)
    b = paired_rows(folder, n_resamples=500, seed=4)
    assert a == b
    flat = tmp_path / "flat"
    _write_run(flat / "runs" / "base", [1.0, 0.0, 1.0], [[1.0], [0.0], [1.0]])
    _write_run(flat / "runs" / "L0", [1.0, 1.0, 1.0], [[1.0], [1.0], [1.0]])
    rows = paired_rows(flat, n_resamples=500)
    assert rows[1].p_recover is not None and math.isnan(rows[1].p_recover.value)
    assert rows[0].drop.value == 0.0 and math.isnan(rows[0].drop.mde)
    # perturbed above clean is no drop either: a correction that lowers the perturbed score back
    # is not "100 % recovery"
    up = tmp_path / "up"
    _write_run(up / "runs" / "base", [1.0, 0.0, 0.0], [[1.0], [1.0], [0.0]])
    _write_run(up / "runs" / "L7", [1.0, 0.0, 0.0], [[1.0], [0.0], [0.0]])
    rows = paired_rows(up, n_resamples=500)
    assert rows[0].drop.value > 0 and rows[1].gain is not None and rows[1].gain.value < 0
    assert rows[1].p_recover is not None and math.isnan(rows[1].p_recover.value)


def test_mismatched_examples_and_missing_base_are_refused(tmp_path: Path) -> None:
    _write_run(tmp_path / "a" / "runs" / "base", [1.0, 0.0], [[1.0], [0.0]])
    _write_run(tmp_path / "a" / "runs" / "L3", [1.0, 0.0, 1.0], [[1.0], [0.0], [0.0]])
    with pytest.raises(SweepError, match=r"different examples.*same --metadata"):
        paired_rows(tmp_path / "a", n_resamples=200)
    _write_run(tmp_path / "b" / "runs" / "L3", [1.0, 0.0], [[1.0], [0.0]])
    with pytest.raises(SweepError, match="no base run"):
        paired_rows(tmp_path / "b", n_resamples=200)


def test_cli_writes_the_tables_and_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = _sweep(tmp_path)
    out = tmp_path / "out"
    assert main([str(folder), "-o", str(out), "--resamples", "500"]) == 0
    for name in ("sweep.md", "sweep.csv", "sweep.json", "sweep.png"):
        assert (out / name).stat().st_size > 0
    md = (out / "sweep.md").read_text(encoding="utf-8")
    assert "| base |" in md and "| L7 |" in md and "n = 40 examples" in md
    data = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    assert [r["label"] for r in data] == ["base", "L7"]
    assert main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no runs/ folder" in err[0]


def test_a_corrupt_or_cut_samples_file_is_one_line_error(tmp_path: Path) -> None:
    _write_run(tmp_path / "a" / "runs" / "base", [1.0, 0.0], [[1.0], [0.0]])
    f = next((tmp_path / "a").rglob("samples_*.jsonl"))
    f.write_text(f.read_text(encoding="utf-8") + '{"doc_id": 9, "em_cl\n', encoding="utf-8")
    with pytest.raises(SweepError, match=r":5: not valid JSON .*rerun that label"):
        paired_rows(tmp_path / "a", n_resamples=200)
    _write_run(tmp_path / "b" / "runs" / "base", [1.0, 0.0], [[1.0], [0.0]], gz=True)
    g = next((tmp_path / "b").rglob("samples_*.jsonl.gz"))
    g.write_bytes(g.read_bytes()[:-12])  # a run cut halfway: the gzip stream ends early
    with pytest.raises(SweepError, match=r"cannot be read.*rerun that label"):
        paired_rows(tmp_path / "b", n_resamples=200)


def test_variant_labels_are_their_own_rows_in_layer_order(tmp_path: Path) -> None:
    # ``L14-k4_triviaqa`` (another k) is a row of its own beside ``L14_triviaqa``, after ``L7``
    folder, _ = _sweep(tmp_path)
    clean, pert = [1.0] * 40, [[0.0, 1.0]] * 40
    _write_run(folder / "runs" / "L14-k4_triviaqa", clean, pert)
    _write_run(folder / "runs" / "L14_triviaqa", clean, pert)
    _write_run(folder / "runs" / "notalabel", clean, pert)
    labels = [r.label for r in paired_rows(folder, n_resamples=200)]
    assert labels == ["base", "L7", "L14", "L14-k4"]


def test_exact_p_beside_the_interval(tmp_path: Path) -> None:
    """One perturbation per example, 6 answers broken and 1 fixed out of 30: the BCa interval
    may exclude 0 but the exact McNemar p is 2 P(Bin(7, 1/2) <= 1) = 0.125."""
    clean = [1.0] * 6 + [0.0] + [1.0] * 23
    pert = [[0.0]] * 6 + [[1.0]] + [[1.0]] * 23
    _write_run(tmp_path / "runs" / "base", clean, pert)
    _write_run(tmp_path / "runs" / "L0", clean, pert)
    base, layer = paired_rows(tmp_path, n_resamples=500)
    assert base.drop.p == pytest.approx(0.125)
    assert layer.gain is not None and layer.gain.p == 1.0  # nothing changed
    md = render([base, layer])
    assert "0.125 / – / –" in md
