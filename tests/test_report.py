"""The report on synthetic lm-eval output folders: pairing by ids, hand-checked deltas, CIs,
errors for runs that cannot be compared, written files and plots."""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lm_eval_robust.cli.report import main
from lm_eval_robust.report.estimates import ReportSettings, build_report
from lm_eval_robust.report.tables import to_csv, to_json, to_markdown
from lm_eval_robust.stats import classification
from lm_eval_robust.stats.certificates import CertConfig
from lm_eval_robust.values import pairing

STAMP = "2025-01-01T00-00-00.000001"
# the conservative estimator, whose n/a cases at few variants the tests below rely on
FAST = ReportSettings(n_resamples=400, cert=CertConfig.named("distribution_free"), n_splits=5)


def _ll(gold: int, margin: float) -> list[float]:
    """Binary label log-likelihoods with ``ll[gold] - ll[other] = margin``."""
    ll = [0.0, 0.0]
    ll[1 - gold] = -margin
    return ll


def _sample(task: str, kind: str, ex: str, pid: int, gold: int, ll: list[float]) -> dict:
    item = {
        "task": task.split("_")[0],
        "example_id": ex,
        "pert_id": pid,
        "gold": gold,
        "pred": int(np.argmax(ll)),
        "margin": ll[gold] - ll[1 - gold],
        "ll": ll,
    }
    doc = {"task": item["task"], "kind": kind, "split": "test", "example_id": ex, "gold": gold}
    doc |= {"pert_id": pid, "prompt": f"prompt {ex} {pid}", "labels": ["A", "B"]}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    return {
        "doc_id": 0,
        "doc": doc,
        "target": str(gold),
        "resps": [],
        "filtered_resps": [],
        "doc_hash": digest,
        "bac_clean": item,
        "bac_pert": item,
        "delta_drop": item,
    }


def _write_run(
    root: Path,
    tasks: dict[str, list[dict]],
    *,
    model_args: str = "pretrained=tiny",
    n_perturbations: int = 4,
    samples: bool = True,
    shuffle: int = 0,
) -> Path:
    folder = root / "tiny"
    folder.mkdir(parents=True)
    configs = {
        t: {
            "task": t,
            "dataset_kwargs": {"lmer_task": t.split("_")[0], "lmer_kind": "format"},
            "metadata": {"version": 1.0, "n_examples": 80, "n_perturbations": n_perturbations}
            | {"seed": 1234, "pretrained": "tiny"},
        }
        for t in tasks
    }
    results = {
        "results": {t: {"alias": t} for t in tasks},
        "configs": configs,
        "config": {"model": "debiased_hf", "model_args": model_args},
    }
    (folder / f"results_{STAMP}.json").write_text(json.dumps(results))
    if samples:
        for t, lines in tasks.items():
            lines = list(lines)
            random.Random(shuffle).shuffle(lines)  # the harness gives no order guarantee
            text = "".join(json.dumps(s) + "\n" for s in lines)
            (folder / f"samples_{t}_{STAMP}.jsonl").write_text(text)
    return root


def _task_a(debiased: bool) -> list[dict]:
    """8 examples (gold 0,1,0,1,...), 4 variants each.

    Base: clean all right; variants of e0, e2 (class 0) all wrong -> BAC clean 100, pert 75.
    Debiased: e6's clean prompt turns wrong, e0's variants turn right -> clean 87.5, pert 87.5.
    """
    task, out = "ni065_format_pert", []
    for e in range(8):
        gold = e % 2
        clean_ok = not (debiased and e == 6)
        out.append(_sample(task, "format", f"e{e}", 0, gold, _ll(gold, 2.0 if clean_ok else -1.0)))
        wrong = e == 2 or (e == 0 and not debiased)
        for p in range(1, 5):
            out.append(_sample(task, "format", f"e{e}", p, gold, _ll(gold, -1.0 if wrong else 1.5)))
    return out


def _task_b(debiased: bool, seed: int = 0) -> list[dict]:
    """30 examples x 40 variants with noisy margins; debiasing adds 1.5 to every margin."""
    rng = np.random.default_rng(seed)
    task, out = "ni220_format_pert", []
    for e in range(30):
        gold = e % 2
        base = rng.uniform(-1, 4)
        shift = 1.5 if debiased else 0.0
        out.append(_sample(task, "format", f"x{e}", 0, gold, _ll(gold, base + shift)))
        noise = rng.normal(-0.8, 0.6, 40)
        for p in range(1, 41):
            m = base + noise[p - 1] + shift
            out.append(_sample(task, "format", f"x{e}", p, gold, _ll(gold, float(m))))
    return out


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    base = _write_run(
        tmp_path / "base",
        {"ni065_format_pert": _task_a(False), "ni220_format_pert": _task_b(False)},
        shuffle=1,
    )
    deb = _write_run(
        tmp_path / "debiased",
        {"ni065_format_pert": _task_a(True), "ni220_format_pert": _task_b(True)},
        model_args="pretrained=tiny,correction=corr",
        shuffle=2,
    )
    return base, deb


# ----------------------------------------------------------------------------------- values


def test_hand_checked_deltas_paired_by_ids(tmp_path: Path) -> None:
    base, deb = _runs(tmp_path)
    runs = pairing.label_runs([base, deb], ["base", "debiased"])
    assert runs[1].model == "tiny+correction"
    report = build_report(runs, FAST)
    t = {(s.run, s.task): s for s in report.tasks}
    a0, a1 = t[("base", "ni065_format_pert")], t[("debiased", "ni065_format_pert")]
    assert a0.metrics["bac_clean"].value == pytest.approx(100.0)
    assert a0.metrics["bac_pert"].value == pytest.approx(75.0)
    assert a0.metrics["delta_drop"].value == pytest.approx(-25.0)
    assert a1.metrics["bac_clean"].value == pytest.approx(87.5)
    assert a0.maj_share_clean == pytest.approx(50.0)
    # the same numbers as the harness aggregation on the raw items
    items = runs[0].tasks["ni065_format_pert"].item_list()
    assert a0.metrics["bac_pert"].value == pytest.approx(100 * classification.bac_pert(items))
    (p,) = [p for p in report.pairs if p.task == "ni065_format_pert"]
    m = {k: v.value for k, v in p.metrics.items()}
    assert m["delta_clean"] == pytest.approx(-12.5)
    assert m["delta_pert"] == pytest.approx(12.5)
    assert m["p_damage"] == pytest.approx(25.0)
    assert m["p_recover"] == pytest.approx(50.0)
    assert m["p_clean"] == pytest.approx(-12.5)
    # pooled BAC: class 0 12/20 -> 15/20, class 1 always 20/20: 80 -> 87.5, +9.375%
    assert m["p_combined"] == pytest.approx(9.375)
    # K = 4: 2 estimation variants -> eps_B = 1/3 > phi: certificates not computable
    assert math.isnan(a0.metrics["p_h"].value)
    assert any("estimation variants" in n for n in a0.notes)


def test_cis_contain_the_estimates(tmp_path: Path) -> None:
    base, deb = _runs(tmp_path)
    report = build_report(pairing.label_runs([base, deb], None), FAST)
    checked = 0
    for s in [*report.tasks, *report.pairs]:
        for name, e in s.metrics.items():
            if math.isfinite(e.low):
                assert e.low <= e.value + 1e-9 and e.value <= e.high + 1e-9, (s.task, name)
                checked += 1
    assert checked > 20
    # task B: certification is computable and debiasing (a margin shift) raises it
    (pb,) = [p for p in report.pairs if p.task == "ni220_format_pert"]
    assert pb.metrics["d_p_c"].value > 0 and pb.metrics["d_p_h"].value > 0
    tb = next(s for s in report.tasks if s.task == "ni220_format_pert" and s.run == "debiased")
    v = tb.verification["h"]
    assert v.n_certified > 0 and v.bac_certified >= v.bac_uncertified


def test_order_of_docs_does_not_matter(tmp_path: Path) -> None:
    base, deb = _runs(tmp_path)
    again = _write_run(
        tmp_path / "again",
        {"ni065_format_pert": _task_a(True), "ni220_format_pert": _task_b(True)},
        shuffle=99,
    )
    r1 = build_report(pairing.label_runs([base, deb], ["b", "d"]), FAST)
    r2 = build_report(pairing.label_runs([base, again], ["b", "d"]), FAST)
    for p1, p2 in zip(r1.pairs, r2.pairs, strict=True):
        for k in p1.metrics:
            a, b = p1.metrics[k], p2.metrics[k]
            np.testing.assert_equal([a.value, a.low, a.high], [b.value, b.low, b.high])


# ----------------------------------------------------------------------------------- errors


def test_unpairable_settings(tmp_path: Path) -> None:
    base = _write_run(tmp_path / "a", {"ni065_format_pert": _task_a(False)})
    other = _write_run(tmp_path / "b", {"ni065_format_pert": _task_a(True)}, n_perturbations=5)
    runs = pairing.label_runs([base, other], None)
    with pytest.raises(pairing.UnpairableError, match="n_perturbations"):
        pairing.pair_runs(*runs)


def test_unpairable_docs(tmp_path: Path) -> None:
    base = _write_run(tmp_path / "a", {"ni065_format_pert": _task_a(False)})
    other = _write_run(tmp_path / "b", {"ni065_format_pert": _task_a(True)[:-3]})
    with pytest.raises(pairing.UnpairableError, match="different docs"):
        pairing.pair_runs(*pairing.label_runs([base, other], None))
    changed = _task_a(True)
    changed[5]["doc_hash"] = "0" * 64
    third = _write_run(tmp_path / "c", {"ni065_format_pert": changed})
    with pytest.raises(pairing.UnpairableError, match="differs between runs"):
        pairing.pair_runs(*pairing.label_runs([base, third], None))
    fourth = _write_run(tmp_path / "d", {"ni220_format_pert": _task_b(True)})
    with pytest.raises(pairing.UnpairableError, match="share no task"):
        pairing.pair_runs(*pairing.label_runs([base, fourth], None))


def test_missing_results_and_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(pairing.NoResultsError, match="no results"):
        pairing.load_run(tmp_path / "empty")
    nos = _write_run(tmp_path / "nos", {"ni065_format_pert": _task_a(False)}, samples=False)
    with pytest.raises(pairing.NoSamplesError, match="--log_samples"):
        pairing.load_run(nos)
    assert main([str(nos), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lm-eval-robust report: error:") and "\n" not in err


# ------------------------------------------------------------------------------------ files


def _is_png(path: Path) -> bool:
    return path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_writes_tables_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, deb = _runs(tmp_path)
    out = tmp_path / "report"
    args = [str(base), str(deb), "--labels", "base,debiased", "-o", str(out), "--resamples", "300"]
    args += ["--splits", "5"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "| debiased vs base | ni065_format_pert |" in printed
    md = (out / "report.md").read_text()
    assert md == printed.rstrip("\n") or printed.startswith(md)
    assert "δ_drop" in md and "p_recover" in md and "## Across tasks" in md
    rows = (out / "report.csv").read_text().splitlines()
    assert len(rows) == 1 + 4  # two runs x two tasks
    assert "vs_p_recover" in rows[0]
    doc = json.loads((out / "report.json").read_text())
    assert {p["task"] for p in doc["pairs"]} == {"ni065_format_pert", "ni220_format_pert"}
    for name in ("deltas.png", "certification.png", "verification.png"):
        assert _is_png(out / name), name


def test_single_run_report(tmp_path: Path) -> None:
    base, _ = _runs(tmp_path)
    report = build_report(pairing.label_runs([base], None), FAST)
    assert not report.pairs and len(report.tasks) == 2
    md = to_markdown(report)
    assert "Robustness per model × task" in md and "Debiasing" not in md
    assert to_csv(report).count("\n") == 3
    from lm_eval_robust.report.plots import write_plots

    for path in write_plots(report, tmp_path / "plots"):
        assert _is_png(path)


def test_gzipped_samples_are_read(tmp_path: Path) -> None:
    import gzip

    from lm_eval_robust.values.pairing import load_run

    run = _write_run(tmp_path / "r", {"ni065_format_pert": _task_a(False)})
    plain = load_run(run)
    for f in (run / "tiny").glob("samples_*.jsonl"):
        with gzip.open(f.with_name(f.name + ".gz"), "wt", encoding="utf-8") as out:
            out.write(f.read_text(encoding="utf-8"))
        f.unlink()
    zipped = load_run(run)
    assert zipped.tasks["ni065_format_pert"].items == plain.tasks["ni065_format_pert"].items


@pytest.mark.slow
def test_six_runs_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """base / debias / batch cal. / contextual cal. / LoRA / LoRA+debias: each paired with base."""
    labels = ["base", "debias", "bc", "cc", "lora", "lora_debias"]
    runs = [
        _write_run(
            tmp_path / name,
            {"ni065_format_pert": _task_a(i % 2 == 1), "ni220_format_pert": _task_b(i > 2, i)},
            model_args=f"pretrained=tiny,correction={name}" if i else "pretrained=tiny",
            shuffle=i,
        )
        for i, name in enumerate(labels)
    ]
    out = tmp_path / "report"
    args = [*map(str, runs), "--labels", ",".join(labels), "-o", str(out), "--resamples", "300"]
    assert main(args) == 0
    md = capsys.readouterr().out
    assert "## Methods side by side" in md
    section = md.split("## Methods side by side")[1].split("\n## ")[0]
    rows = [r for r in section.splitlines() if r.startswith("| ni065_format_pert |")]
    assert [r.split(" | ")[1] for r in rows] == labels  # in the order given, consecutive
    assert rows[0].rstrip().endswith("| – | – | – |")  # the base is not paired with itself
    # debias (odd runs) recovers 12.5 points of perturbed BAC on task A: δ_pert 12.5, p_recover 50
    for r in (rows[1], rows[3], rows[5]):
        cells = [c.strip() for c in r.strip().strip("|").split("|")]
        assert cells[7].startswith("12.5 [") and cells[8].startswith("50.0")
    doc = json.loads((out / "report.json").read_text())
    assert {(p["other"], p["base"]) for p in doc["pairs"]} == {(x, "base") for x in labels[1:]}
    assert len(doc["across_pairs"]) == 5  # one across-task column per method
    assert _is_png(out / "deltas.png")


def test_certificates_over_splits_in_the_report(tmp_path: Path) -> None:
    """The per-task table shows the finite-sample certificate (n/a below K = 57, with that K),
    the plug-in columns are labelled as such, and the section over splits names each rule's K."""
    base, _ = _runs(tmp_path)
    settings = ReportSettings(n_resamples=200, n_splits=3)
    report = build_report(pairing.label_runs([base], None), settings)
    md = to_markdown(report)
    assert "certified (exact)" in md and "plug-in p_C" in md and "n/a (K ≥ 57)" in md
    assert "## Certificates over splits" in md and "plug-in p_C, K = 40" in md
    by_task = {t.task: t for t in report.tasks}
    exact = by_task["ni220_format_pert"].cert_splits["exact"]
    assert not exact.available and "K >= 57" in exact.reason
    plug = by_task["ni220_format_pert"].cert_splits["plugin_c"]
    assert plug.available and plug.n_splits == 3
    doc = json.loads(to_json(report))
    assert doc["tasks"][0]["cert_splits"]["exact"]["available"] is False
    assert "cert_plugin_c" in to_csv(report).splitlines()[0]
    none = build_report(pairing.label_runs([base], None), replace(settings, n_splits=0))
    assert all(not t.cert_splits for t in none.tasks)
