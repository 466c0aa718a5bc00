"""Collect → fit → apply, end to end on the tiny model, against a plain numpy evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

MD = {"n_perturbations": 4, "n_examples": 40}


def _requests(task: str) -> list:
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    tm = TaskManager(include_path=lm_eval_robust.task_dir(), include_defaults=False, metadata=MD)
    t = tm.load([task])["tasks"][task]
    t.build_all_requests(rank=0, world_size=1)
    return list(t.instances)


def _lm(model_dir: Path, **kw):
    from lm_eval_robust.scoring.model import DebiasedHFLM

    return DebiasedHFLM(
        pretrained=str(model_dir), batch_size=8, dtype="float32", device="cpu", **kw
    )


@pytest.fixture(scope="module")
def fitted(tiny_model_dir: Path, data_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    from lm_eval_robust.scoring.correction import save
    from lm_eval_robust.stats.fit.run import FitSettings, fit_features
    from lm_eval_robust.values.features import load_features

    root = tmp_path_factory.mktemp("features")
    lm = _lm(tiny_model_dir, collect_features=str(root))
    lm.loglikelihood(_requests("ni322_format_pert_train"), disable_tqdm=True)
    feats = load_features(root / "ni322_format_pert_train")
    corr = fit_features(feats, FitSettings(lam=1.0))
    path = tmp_path_factory.mktemp("corr") / "ni322.safetensors"
    save(corr, path)
    return feats, corr, path, root


def test_features_shapes(fitted) -> None:
    feats, *_ = fitted
    assert feats.x.shape == (20 * 5, 32)  # 20 train examples x (clean + 4)
    assert feats.label_logits.shape == (100, 2)
    p = feats.paired()
    assert p.x_pert.shape[0] == 80
    # pairing: every perturbed row's clean reference has the same example id and pert_id 0
    assert set(p.example_id) == set(p.example_id_clean)


def test_correction_stats(fitted) -> None:
    _, corr, *_ = fitted
    assert corr.task == "ni322_format_pert"
    assert corr.W is not None and corr.W.shape == (33, 2)
    radii = corr.stats["radii"]
    assert len(radii["eps_V_before"]) == 2 and np.isfinite(radii["p_eps_V"])
    assert "p_eps_L" in radii


@pytest.mark.slow
def test_applied_correction_equals_numpy(fitted, tiny_model_dir: Path, tmp_path: Path) -> None:
    from lm_eval_robust.values.features import load_features

    _, corr, path, _ = fitted
    reqs = _requests("ni322_format_pert")
    lm = _lm(tiny_model_dir, correction=str(path), collect_features=str(tmp_path))
    out = lm.loglikelihood(reqs, disable_tqdm=True)
    raw = load_features(tmp_path / "ni322_format_pert")
    # numpy: M* = M - (x W[:n] + W[n] + beta); label log-likelihood differences = M* differences
    w, beta = np.asarray(corr.W), np.asarray(corr.beta)
    m_star = raw.label_logits - (raw.x @ w[:-1] + w[-1] + beta)
    expected = {
        (e, int(p)): m_star[i, 1] - m_star[i, 0]
        for i, (e, p) in enumerate(zip(raw.example_id, raw.pert_id, strict=True))
    }
    got: dict[tuple[str, int], dict[int, float]] = {}
    for req, (ll, _) in zip(reqs, out, strict=True):
        got.setdefault((req.doc["example_id"], req.doc["pert_id"]), {})[req.idx] = ll
    assert len(got) == len(expected)
    for k, v in got.items():
        assert v[1] - v[0] == pytest.approx(expected[k], abs=1e-4)


def test_correction_changes_predictions_only_through_labels(fitted, tiny_model_dir: Path) -> None:
    _, _, path, _ = fitted
    reqs = _requests("ni322_format_pert")[:20]
    base = _lm(tiny_model_dir).loglikelihood(reqs, disable_tqdm=True)
    deb = _lm(tiny_model_dir, correction=str(path)).loglikelihood(reqs, disable_tqdm=True)
    assert any(abs(a[0] - b[0]) > 1e-6 for a, b in zip(base, deb, strict=True))


def test_correction_for_other_model_is_refused(
    fitted, tiny_model_dir: Path, tmp_path: Path
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_robust.scoring.correction import CorrectionError

    _, _, path, _ = fitted
    other = tmp_path / "other"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.01)
    model.save_pretrained(other)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(other)
    with pytest.raises(CorrectionError, match="fitted for model"):
        _lm(other, correction=str(path))


def test_missing_task_correction(fitted, tiny_model_dir: Path) -> None:
    from lm_eval_robust.scoring.correction import CorrectionError

    _, _, path, _ = fitted
    lm = _lm(tiny_model_dir, correction=str(path))
    with pytest.raises(CorrectionError, match="no correction for task 'ni280_format_pert'"):
        lm.loglikelihood(_requests("ni280_format_pert")[:4], disable_tqdm=True)


def test_fit_cli(fitted, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from lm_eval_robust.cli import main
    from lm_eval_robust.scoring.correction import load

    *_, root = fitted
    feats = str(root / "ni322_format_pert_train")
    out = tmp_path / "c.safetensors"
    argv = ["fit", "--task", "ni322_format_pert", "--features", feats, "--lam", "auto"]
    assert main([*argv, "-o", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["task"] == "ni322_format_pert" and summary["lam"] > 0
    assert load(out).stats["lambda_selection"]["table"]
    plot = tmp_path / "constant.png"
    argv = ["fit", "--task", "ni322_format_pert", "--features", feats, "--method", "constant"]
    assert main([*argv, "--plot", str(plot), "-o", str(tmp_path / "k.safetensors")]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["method"] == "constant"
    assert plot.stat().st_size > 1000
    if line.get("b") is None:
        assert line["reason"] and not (tmp_path / "k.safetensors").exists()
    else:
        assert load(tmp_path / "k.safetensors").method == "constant"


def test_generation_hook_applies_correction(fitted, tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from lm_eval_robust.scoring.correction import load
    from lm_eval_robust.scoring.model import corrected_head, last_positions_head

    _, _, path, _ = fitted
    corr = load(path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    inps = torch.randint(3, 200, (2, 7))
    last = torch.tensor([[6], [6]])
    with torch.no_grad():
        with last_positions_head(model, last) as cap:
            raw = model(inps).logits[:, -1]
        with corrected_head(model, corr):
            fixed = model(inps).logits[:, -1]
    x = cap["hidden"][:, -1].numpy()
    w, beta = np.asarray(corr.W), np.asarray(corr.beta)
    ids = corr.label_token_ids
    expected = raw[:, ids].numpy() - (x @ w[:-1] + w[-1] + beta)
    np.testing.assert_allclose(fixed[:, ids].numpy(), expected, atol=1e-4)
    others = [i for i in range(raw.shape[1]) if i not in ids]
    torch.testing.assert_close(fixed[:, others], raw[:, others])


def test_generate_until_with_correction(fitted, tiny_model_dir: Path) -> None:
    from lm_eval.api.instance import Instance

    _, _, path, _ = fitted
    lm = _lm(tiny_model_dir, correction=str(path))
    req = Instance("generate_until", {}, ("Comment: hello\nAnswer:", {"max_gen_toks": 3}), 0)
    out = lm.generate_until([req], disable_tqdm=True)
    assert isinstance(out[0], str)


def test_batch_calibration_is_the_train_mean(fitted) -> None:
    from lm_eval_robust.stats.fit.run import FitSettings, fit_features

    feats, *_ = fitted
    corr = fit_features(feats, FitSettings(method="batch_calibration"))
    assert corr.W is None and corr.method == "batch_calibration"
    np.testing.assert_allclose(corr.beta, feats.label_logits.mean(axis=0), rtol=1e-6)


def test_contextual_calibration(tiny_model_dir: Path, data_dir: Path) -> None:
    from lm_eval.api.instance import Instance

    from lm_eval_robust.stats.fit.run import contextual_calibration
    from lm_eval_robust.tasks.ni import NIConfig, content_free_prompts

    lm = _lm(tiny_model_dir)
    cfg = NIConfig(n_examples=20, n_perturbations=1, data_dir=str(data_dir))
    corr = contextual_calibration("ni322_format_pert", lm, cfg)
    prompts, choices = content_free_prompts("ni322", cfg)
    assert len(prompts) == 3 and all(p.endswith("Answer:") for p in prompts)
    assert "Comment: N/A" in prompts[0]
    # by hand: mean over the content-free prompts of the label distribution
    reqs = [
        Instance("loglikelihood", {}, (p, " " + c), i)
        for p in prompts
        for i, c in enumerate(choices)
    ]
    ll = np.array([r[0] for r in lm.loglikelihood(reqs, disable_tqdm=True)]).reshape(3, 2)
    p = np.exp(ll) / np.exp(ll).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.exp(corr.beta), p.mean(axis=0), rtol=1e-6)
    assert corr.method == "contextual_calibration" and corr.task == "ni322_format_pert"


def test_fit_takes_selects_targets_file(fitted, tmp_path: Path, capsys) -> None:
    """``fit --tasks targets.json``: one correction per target, features from the root folder,
    the same correction as ``fit --task`` gives."""
    import json

    from lm_eval_robust.cli import main
    from lm_eval_robust.scoring.correction import load

    *_, root = fitted
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"targets": ["ni322_format_pert"], "table": []}))
    out = tmp_path / "corrections"
    argv = ["fit", "--tasks", str(targets), "--features", str(root), "--method"]
    assert main([*argv, "batch_calibration", "--lam", "1", "-o", str(out)]) == 0
    many = load(out / "ni322_format_pert.safetensors")
    single = tmp_path / "single.safetensors"
    feats = str(root / "ni322_format_pert_train")
    argv = ["fit", "--task", "ni322_format_pert", "--features", feats, "--method"]
    assert main([*argv, "batch_calibration", "-o", str(single)]) == 0
    np.testing.assert_array_equal(many.beta, load(single).beta)
    # refitted into the same folder: replaced whole, no correction of the earlier fit left
    stale = out / "ni065_format_pert.safetensors"
    stale.write_bytes(b"an earlier fit")
    again = ["fit", "--tasks", str(targets), "--features", str(root), "--method"]
    capsys.readouterr()
    assert main([*again, "batch_calibration", "--lam", "1", "-o", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["out"] == str(out / "ni322_format_pert.safetensors")
    assert sorted(p.name for p in out.iterdir()) == ["ni322_format_pert.safetensors"]
    # a folder holding files fit does not write is refused, and left as it was
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main([*again, "batch_calibration", "-o", str(out)]) == 2
    assert "holds notes.txt, not written by fit --tasks" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"
    capsys.readouterr()
    assert main(["fit", "--tasks", str(targets), "-o", str(tmp_path / "x.safetensors")]) == 2
    assert "with --tasks, -o is a folder" in capsys.readouterr().err
    assert main(["fit", "-o", str(out)]) == 2
    assert "give --task TASK, or --tasks" in capsys.readouterr().err


def test_fit_beta_rule_is_recorded(fitted, tmp_path: Path) -> None:
    from lm_eval_robust.base.errors import UserError
    from lm_eval_robust.cli import main
    from lm_eval_robust.scoring.correction import load
    from lm_eval_robust.stats.fit.run import FitSettings

    *_, root = fitted
    feats = str(root / "ni322_format_pert_train")
    argv = ["fit", "--task", "ni322_format_pert", "--features", feats, "--lam", "1"]
    assert main([*argv, "--beta", "mean", "-o", str(tmp_path / "m.safetensors")]) == 0
    assert main([*argv, "-o", str(tmp_path / "p.safetensors")]) == 0
    mean, mid = load(tmp_path / "m.safetensors"), load(tmp_path / "p.safetensors")
    assert (mean.stats["beta_rule"], mid.stats["beta_rule"]) == ("mean", "midpoint")
    np.testing.assert_array_equal(mean.W, mid.W)
    assert not np.allclose(mean.beta, mid.beta)
    with pytest.raises(UserError, match="unknown beta rule"):
        FitSettings(beta="median")
