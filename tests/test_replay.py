"""``lm-eval-robust replay``: a correction replayed on a logged run equals running the model."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from lm_eval_robust.base.harness_names import ROBUSTNESS_METRICS
from lm_eval_robust.report.estimates import ReportSettings, build_report
from lm_eval_robust.report.replay import ReplayError, corrected_loglikelihoods, replay
from lm_eval_robust.report.tables import to_csv, to_markdown
from lm_eval_robust.values.pairing import _fits, label_runs

TASK = "ni1284_format_pert"
#: the robustness aggregations (recomputed by replay like every other metric)
ROBUSTNESS = tuple(f"robust_{m},none" for m in ROBUSTNESS_METRICS)
MD = json.dumps({"n_examples": 12, "n_perturbations": 2})


def _run(tmp: Path, model_dir: Path, out: str, **extra: str) -> Path:
    from lm_eval_robust.cli import main

    args = ",".join([f"pretrained={model_dir}", *(f"{k}={v}" for k, v in extra.items())])
    rc = main(
        [
            "run",
            "--model",
            "debiased_hf",
            "--model_args",
            args,
            "--tasks",
            TASK,
            "--metadata",
            MD,
            "--batch_size",
            "4",
            "--output_path",
            str(tmp / out),
            "--log_samples",
        ]
    )
    assert rc == 0
    return tmp / out


def _samples(run: Path) -> dict[tuple[str, int], dict]:
    files = list(run.glob(f"*/samples_{TASK}_*.jsonl")) + list(run.glob(f"*/samples_{TASK}_*.gz"))
    assert len(files) == 1
    out = {}
    raw = files[0].read_bytes()
    text = gzip.decompress(raw).decode("utf-8") if files[0].suffix == ".gz" else raw.decode()
    for line in text.splitlines():
        s = json.loads(line)
        out[(s["doc"]["example_id"], s["doc"]["pert_id"])] = s
    return out


def test_corrected_loglikelihoods_by_hand() -> None:
    logits = np.array([2.0, 0.5, -1.0, 0.3, -3.0])  # labels are tokens 0 and 1
    b = np.array([0.7, -0.4])
    ll = logits - np.log(np.exp(logits).sum())
    fixed = logits.copy()
    fixed[:2] -= b
    want = (fixed - np.log(np.exp(fixed).sum()))[:2]
    np.testing.assert_allclose(corrected_loglikelihoods(ll[:2], b), want, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_replay_equals_a_real_debiased_run(tiny_model_dir: Path, data_dir: Path, tmp_path: Path):
    from lm_eval_robust.scoring.correction import save
    from lm_eval_robust.stats.fit.run import FitSettings, fit_features
    from lm_eval_robust.values.features import load_features
    from lm_eval_robust.values.pairing import load_run

    base = _run(tmp_path, tiny_model_dir, "base", collect_features=str(tmp_path / "feats"))
    feats = load_features(tmp_path / "feats" / TASK)
    # an input-dependent correction (ridge, fixed lambda) fitted on these features: the test is
    # about replay equalling the model, not about the fit
    corr = fit_features(feats, FitSettings(method="ridge", lam=1e-2))
    assert corr.W is not None and np.abs(corr.W).max() > 0
    save(corr, tmp_path / "corr" / f"{TASK}.safetensors")
    real = _run(tmp_path, tiny_model_dir, "real", correction=str(tmp_path / "corr"))
    replay(base, tmp_path / "feats", tmp_path / "corr", tmp_path / "replayed")
    got, want = _samples(tmp_path / "replayed"), _samples(real)
    assert got.keys() == want.keys() == _samples(base).keys() and len(got) >= 6
    changed = 0
    for k, s in want.items():
        ll_real = [float(r[0][0]) for r in s["resps"]]
        ll_rep = [float(r[0][0]) for r in got[k]["resps"]]
        np.testing.assert_allclose(ll_rep, ll_real, atol=2e-4)
        assert got[k]["robust_bac_clean"]["pred"] == s["robust_bac_clean"]["pred"]
        base_ll = [float(r[0][0]) for r in _samples(base)[k]["resps"]]
        changed += not np.allclose(base_ll, ll_real, atol=1e-3)
    assert changed > 0  # the correction did something
    run = load_run(tmp_path / "replayed")
    assert TASK in run.tasks
    results = json.loads(run.results_file.read_text())
    assert results["lm_eval_robust_replay"]["tasks"] == [TASK]
    real_res = json.loads(next(real.glob("*/results_*.json")).read_text())["results"][TASK]
    for key in (
        *ROBUSTNESS,
        "robust_bac_clean,none",
        "robust_bac_pert,none",
        "robust_auc_pert,none",
    ):
        assert results["results"][TASK][key] == pytest.approx(real_res[key], abs=1e-9, nan_ok=True)
    # every standard error is the replayed run's own (as the real corrected run computes it),
    # none copied from the base run; one without a bootstrap of its own is "N/A"
    base_res = json.loads(next(base.glob("*/results_*.json")).read_text())["results"][TASK]
    stderrs = [k for k in results["results"][TASK] if k.partition(",")[0].endswith("_stderr")]
    assert stderrs and set(stderrs) == {k for k in real_res if "_stderr," in k}
    moved = 0
    for key in stderrs:
        got_se, want_se = results["results"][TASK][key], real_res[key]
        if want_se == "N/A":
            assert got_se == "N/A", key
            continue
        assert got_se == pytest.approx(want_se, abs=1e-6, nan_ok=True), key
        moved += got_se != base_res[key]
    assert moved > 0  # the correction moved some of them: a copy would have kept the base's
    # the fit's radius change reaches the report: recorded by replay, read from the correction
    # file named in model_args for the real run, absent for the base run
    p_eps_v = corr.stats["radii"]["p_eps_V"]
    assert results["lm_eval_robust_replay"]["corrections"][TASK]["p_eps_V"] == p_eps_v
    runs = label_runs([base, real, tmp_path / "replayed"], ["base", "real", "replayed"])
    assert runs[0].fits == {}
    for r in runs[1:]:
        assert r.fits[TASK]["method"] == "ridge" and r.fits[TASK]["p_eps_V"] == p_eps_v
    report = build_report(runs, ReportSettings(n_resamples=200))
    md = to_markdown(report)
    assert "p_εV (train)" in md and "p_εV (test)" in md
    test_v = results["lm_eval_robust_replay"]["corrections"][TASK]["p_eps_V_test"]
    assert math.isfinite(test_v)
    row = next(line for line in md.splitlines() if line.startswith("| replayed vs base |"))
    cells = row.split(" | ")
    assert f"{p_eps_v:.1f}" in cells and f"{test_v:.1f}" in cells
    csv_rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    by_run = {r["run"]: r for r in csv_rows}
    assert float(by_run["real"]["fit_p_eps_V"]) == pytest.approx(p_eps_v, rel=1e-5)
    assert "fit_p_eps_V" in by_run["base"] and by_run["base"]["fit_p_eps_V"] == ""
    # guards: a corrected run is not corrected again, a float32 run has nothing to rescore, an
    # -o holding another run is refused, and none of them writes anything
    with pytest.raises(ReplayError, match="already applied a correction"):
        replay(tmp_path / "replayed", tmp_path / "feats", tmp_path / "corr", tmp_path / "again")
    with pytest.raises(ReplayError, match="already applied a correction"):
        replay(real, tmp_path / "feats", tmp_path / "corr", tmp_path / "again")
    with pytest.raises(ReplayError, match="nothing to rescore"):
        replay(base, tmp_path / "feats", None, tmp_path / "again")
    assert not (tmp_path / "again").exists()
    model_dir = next(base.glob("*/results_*.json")).parent.name
    occupied = tmp_path / "other" / model_dir
    occupied.mkdir(parents=True)
    (occupied / "results_2000-01-01T00-00-00.json").write_text("{}")
    with pytest.raises(ReplayError, match="already holds another run"):
        replay(base, tmp_path / "feats", tmp_path / "corr", tmp_path / "other")
    assert [p.name for p in occupied.iterdir()] == ["results_2000-01-01T00-00-00.json"]


def test_a_correction_that_moved_is_named_not_guessed(tmp_path: Path) -> None:
    run = tmp_path / "run" / "m"
    run.mkdir(parents=True)
    res = {"results": {}, "configs": {}, "config": {"model_args": "pretrained=x,correction=gone"}}
    (run / "results_2026.json").write_text(json.dumps(res))
    fits, notes = _fits(res, run / "results_2026.json")
    assert fits == {} and notes == [
        "correction gone not found from here: fit statistics (p_εV, p_εL) left out"
    ]
    (tmp_path / "gone").write_bytes(b"\x80\x04not a safetensors file")  # beside the run's folder
    fits, notes = _fits(res, run / "results_2026.json")
    assert fits == {} and len(notes) == 1 and "pickle" in notes[0]


def test_replay_without_features_or_correction_names_the_fix(tmp_path: Path) -> None:
    run = tmp_path / "run" / "m"
    run.mkdir(parents=True)
    (run / "results_2026.json").write_text(json.dumps({"results": {TASK: {}}, "configs": {}}))
    with pytest.raises(ReplayError, match="collect_features"):
        replay(tmp_path / "run", tmp_path / "nofeats", tmp_path / "corr", tmp_path / "out")
    with pytest.raises(ReplayError, match="give --correction"):
        replay(tmp_path / "run", None, None, tmp_path / "out")
    with pytest.raises(ReplayError, match="give --model FOLDER"):
        replay(tmp_path / "run", None, tmp_path / "corr", tmp_path / "out")


@pytest.mark.slow
def test_replay_without_features_equals_a_real_debiased_run(
    tiny_model_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    """A calibration offset (no W) replayed on the logged scores alone, as for a run by any
    engine: the same log-likelihoods (2e-4), predictions and metrics as debiased_hf applying it;
    a ridge correction, another model and a missing model folder are refused in one line."""
    from lm_eval_robust.scoring.correction import save
    from lm_eval_robust.stats.fit.run import FitSettings, fit_features
    from lm_eval_robust.values.features import load_features

    # features only to fit the corrections; the replay below is not given them
    base = _run(tmp_path, tiny_model_dir, "base", collect_features=str(tmp_path / "feats"))
    feats = load_features(tmp_path / "feats" / TASK)
    calib = fit_features(feats, FitSettings(method="batch_calibration"))
    assert calib.W is None and np.abs(calib.beta).max() > 0
    save(calib, tmp_path / "calib" / f"{TASK}.safetensors")
    real = _run(tmp_path, tiny_model_dir, "real", correction=str(tmp_path / "calib"))
    replay(base, None, tmp_path / "calib", tmp_path / "replayed")
    got, want, bare = _samples(tmp_path / "replayed"), _samples(real), _samples(base)
    assert got.keys() == want.keys() == bare.keys() and len(got) >= 6
    changed = 0
    for k, s in want.items():
        ll_real = [float(r[0][0]) for r in s["resps"]]
        np.testing.assert_allclose([float(r[0][0]) for r in got[k]["resps"]], ll_real, atol=2e-4)
        assert got[k]["robust_bac_pert"]["pred"] == s["robust_bac_pert"]["pred"]
        changed += got[k]["robust_bac_pert"]["pred"] != bare[k]["robust_bac_pert"]["pred"]
    assert changed > 0  # the offset moved predictions
    results = json.loads(next((tmp_path / "replayed").glob("*/results_*.json")).read_text())
    real_res = json.loads(next(real.glob("*/results_*.json")).read_text())["results"][TASK]
    base_res = json.loads(next(base.glob("*/results_*.json")).read_text())["results"][TASK]
    moved = 0
    for key in (
        *ROBUSTNESS,
        "robust_bac_clean,none",
        "robust_bac_pert,none",
        "robust_auc_pert,none",
        "robust_delta_drop,none",
    ):
        assert results["results"][TASK][key] == pytest.approx(real_res[key], abs=1e-9, nan_ok=True)
        moved += base_res[key] != pytest.approx(real_res[key], abs=1e-9, nan_ok=True)
    assert moved > 0  # the metrics compared are ones the offset changed
    block = results["lm_eval_robust_replay"]
    assert block["features"] is None and block["tasks"] == [TASK]
    assert block["corrections"][TASK]["method"] == "batch_calibration"
    # the label scores keep the base run's precision (float32 here): the report pairs them
    base_cfg = json.loads(next(base.glob("*/results_*.json")).read_text())["config"]
    assert results["config"]["label_score_dtype"] == base_cfg["label_score_dtype"]

    ridge = fit_features(feats, FitSettings(method="ridge", lam=1e-2))
    save(ridge, tmp_path / "ridge" / f"{TASK}.safetensors")
    with pytest.raises(ReplayError, match="collect_features=DIR") as info:
        replay(base, None, tmp_path / "ridge", tmp_path / "again")
    assert "\n" not in str(info.value)
    with pytest.raises(ReplayError, match="--model"):
        replay(base, None, tmp_path / "calib", tmp_path / "again", model=str(tmp_path / "nowhere"))
    assert not (tmp_path / "again").exists()


def test_the_model_folder_comes_from_the_run_or_model(tiny_model_dir: Path, tmp_path: Path):
    """``local-completions`` names its checkpoint ``model=``, the HF engines ``pretrained=``."""
    from lm_eval_robust.report.replay_posthoc import model_folder

    served = {"model": str(tiny_model_dir), "base_url": "http://localhost:8000/v1/completions"}
    assert model_folder(served, None) == str(tiny_model_dir)
    assert model_folder({"pretrained": str(tiny_model_dir)}, None) == str(tiny_model_dir)
    assert model_folder({"model": "some-api-model"}, str(tiny_model_dir)) == str(tiny_model_dir)
    with pytest.raises(ReplayError, match="give --model FOLDER"):
        model_folder({"model": "some-api-model"}, None)
