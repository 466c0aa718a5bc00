"""LoRA baseline on the tiny model: training lowers the train loss, adapter files round-trip, the
adapter hook equals the merged weight, adapters and LoRA-fitted corrections are refused on the
wrong model, and the LoRA + debias fingerprint chain."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from lm_eval_robust.scoring.lora import LoraError, load_adapter, save_adapter
from lm_eval_robust.scoring.lora_train import LoraSettings, label_logits, train_lora, train_rows

MD = {"n_perturbations": 3, "n_examples": 24}
TASK = "ni322_format_pert"
FAST = LoraSettings(rank=4, lr=2e-2, epochs=3, batch_size=8, seed=0)


def _lm(model_dir: Path, **kw):
    from lm_eval_robust.scoring.model import DebiasedHFLM

    return DebiasedHFLM(
        pretrained=str(model_dir), batch_size=8, dtype="float32", device="cpu", **kw
    )


def _requests(task: str) -> list:
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    tm = TaskManager(include_path=lm_eval_robust.task_dir(), include_defaults=False, metadata=MD)
    t = tm.load([task])["tasks"][task]
    t.build_all_requests(rank=0, world_size=1)
    return list(t.instances)


def _loss(model: torch.nn.Module, rows: list) -> float:
    with torch.no_grad():
        lg = label_logits(model, rows)
    gold = torch.tensor([r.gold for r in rows])
    return float(torch.nn.functional.cross_entropy(lg, gold))


@pytest.fixture(scope="module")
def trained(tiny_model_dir: Path, data_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    lm = _lm(tiny_model_dir)
    rows = train_rows(lm, TASK + "_train", MD)
    before = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    adapter = train_lora(lm.model, lm.tokenizer, rows, FAST, TASK, progress=False)
    folder = tmp_path_factory.mktemp("adapters")
    save_adapter(adapter, folder / f"{TASK}.safetensors")
    return lm, rows, adapter, folder, before


@pytest.mark.slow
def test_train_rows_are_the_evaluation_prompts(trained) -> None:
    lm, rows, *_ = trained
    assert len(rows) == 12 * 4  # 12 train examples x (clean + 3 perturbations)
    assert sum(r.pert_id == 0 for r in rows) == 12
    assert all(len(r.label_ids) == 2 and len(set(r.label_ids)) == 2 for r in rows)
    # the row's input is exactly what debiased_hf feeds for the same request
    req = next(r for r in _requests(TASK + "_train") if r.doc["pert_id"] == 2)
    ctx, cont = lm._encode_pair(*req.args)
    row = next(r for r in rows if r.example_id == str(req.doc["example_id"]) and r.pert_id == 2)
    assert row.inp == tuple((ctx + cont)[:-1])
    assert cont[-1] in row.label_ids


@pytest.mark.slow
def test_training_lowers_the_train_loss_and_leaves_the_model(trained) -> None:
    lm, rows, adapter, _, before = trained
    # the base model is untouched (adapter removed, weights and flags as they were)
    after = dict(lm.model.named_parameters())
    assert set(after) == set(before)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert adapter.module == "model.layers.0.mlp.up_proj"  # round(8/36 * 2 layers) = 0
    assert adapter.stats["epoch_loss"][-1] < adapter.stats["epoch_loss"][0]
    base = _loss(lm.model, rows)
    with adapter.attached(lm.model):
        tuned = _loss(lm.model, rows)
    assert tuned < base - 0.01
    assert _loss(lm.model, rows) == pytest.approx(base)  # detached again


@pytest.mark.slow
def test_seeded(tiny_model_dir: Path, trained) -> None:
    lm, rows, adapter, *_ = trained
    again = train_lora(lm.model, lm.tokenizer, rows, FAST, TASK, progress=False)
    assert again.sha256 == adapter.sha256


@pytest.mark.slow
def test_hook_equals_merged_weight(trained) -> None:
    lm, rows, adapter, *_ = trained
    with adapter.attached(lm.model):
        hooked = label_logits(lm.model, rows[:4]).detach()
    module = lm.model.get_submodule(adapter.module)
    original = module.weight.detach().clone()
    try:
        with torch.no_grad():
            module.weight += adapter.scaling * (adapter.B @ adapter.A)
        merged = label_logits(lm.model, rows[:4]).detach()
    finally:
        with torch.no_grad():
            module.weight.copy_(original)
    assert torch.allclose(hooked, merged, atol=1e-4)


@pytest.mark.slow
def test_round_trip(trained, tmp_path: Path) -> None:
    _, _, adapter, folder, _ = trained
    back = load_adapter(folder / f"{TASK}.safetensors")
    assert torch.equal(back.A, adapter.A) and torch.equal(back.B, adapter.B)
    assert back.sha256 == adapter.sha256
    assert back.task == TASK and back.module == adapter.module
    assert back.fingerprint == adapter.fingerprint
    assert back.settings["rank"] == 4 and back.settings["layer"] == 0
    assert not list(folder.glob("*.tmp"))  # atomic write leaves no temporary file
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(LoraError, match="not a readable"):
        load_adapter(bad)


@pytest.mark.slow
def test_adapter_changes_scores_and_needs_its_task(tiny_model_dir: Path, trained) -> None:
    _, _, _, folder, _ = trained
    reqs = _requests(TASK)
    base = np.array([r[0] for r in _lm(tiny_model_dir).loglikelihood(reqs, disable_tqdm=True)])
    lm = _lm(tiny_model_dir, lora=str(folder))
    tuned = np.array([r[0] for r in lm.loglikelihood(reqs, disable_tqdm=True)])
    assert np.abs(tuned - base).max() > 1e-3
    with pytest.raises(LoraError, match="no LoRA adapter for task 'ni065_format_pert'"):
        lm.loglikelihood(_requests("ni065_format_pert"), disable_tqdm=True)


@pytest.mark.slow
def test_adapter_refused_on_another_model(tiny_model_dir: Path, trained, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    _, _, _, folder, _ = trained
    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    model = AutoModelForCausalLM.from_pretrained(str(other), dtype=torch.float32)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(1.5)  # head and tokenizer unchanged
    model.save_pretrained(str(other))
    with pytest.raises(LoraError, match=r"trained on .* \(differs in adapted_weight_sha256\)"):
        _lm(other, lora=str(folder))


@pytest.mark.slow
def test_lora_debias_fingerprint_chain(
    tiny_model_dir: Path, trained, tmp_path: Path, data_dir: Path
) -> None:
    from lm_eval_robust.scoring.correction import CorrectionError, save
    from lm_eval_robust.stats.fit.run import FitSettings, fit_features
    from lm_eval_robust.values.features import load_features

    _, _, adapter, folder, _ = trained
    feats_lora, feats_base = tmp_path / "fl", tmp_path / "fb"
    lm = _lm(tiny_model_dir, lora=str(folder), collect_features=str(feats_lora))
    lm.loglikelihood(_requests(TASK + "_train"), disable_tqdm=True)
    _lm(tiny_model_dir, collect_features=str(feats_base)).loglikelihood(
        _requests(TASK + "_train"), disable_tqdm=True
    )
    fl = load_features(feats_lora / f"{TASK}_train")
    fb = load_features(feats_base / f"{TASK}_train")
    assert fl.fingerprint["adapter_sha256"] == adapter.sha256
    assert fb.fingerprint["adapter_sha256"] is None
    assert not np.allclose(fl.label_logits, fb.label_logits)  # features of the LoRA model
    corr_lora = fit_features(fl, FitSettings(lam=1.0))
    corr_base = fit_features(fb, FitSettings(lam=1.0))
    assert corr_lora.fingerprint["adapter_sha256"] == adapter.sha256
    save(corr_lora, tmp_path / "cl" / f"{TASK}.safetensors")
    save(corr_base, tmp_path / "cb" / f"{TASK}.safetensors")
    # LoRA-fitted correction on the base model, and base-fitted on the LoRA model: refused
    with pytest.raises(CorrectionError, match=r"fitted on the model with LoRA adapter .* base"):
        _lm(tiny_model_dir, correction=str(tmp_path / "cl"))
    with pytest.raises(CorrectionError, match=r"fitted on the base model .* LoRA adapter"):
        _lm(tiny_model_dir, lora=str(folder), correction=str(tmp_path / "cb"))
    # the matching pair loads and applies
    both = _lm(tiny_model_dir, lora=str(folder), correction=str(tmp_path / "cl"))
    out = both.loglikelihood(_requests(TASK), disable_tqdm=True)
    assert len(out) == len(_requests(TASK))


@pytest.mark.slow
def test_cli_trains_and_rejects_bad_input(
    tiny_model_dir: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lm_eval_robust.cli import main

    base = ["lora", "--pretrained", str(tiny_model_dir), "--model-args", "dtype=float32"]
    base += ["--metadata", json.dumps(MD)]
    assert main([*base, "--task", TASK, "--rank", "0", "-o", str(tmp_path)]) == 2
    assert "rank must be between 1 and 1024, got 0" in capsys.readouterr().err
    assert main([*base, "--task", "ni322", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "lm-eval-robust: error: --task ni322 is a clean task; use ni322_format_pert or "
        "ni322_text_pert (a perturbed task)\n"
    )
    args = [*base, "--task", TASK, "--epochs", "1", "--rank", "2", "-o", str(tmp_path / "ad")]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["task"] == TASK and summary["rows"] == 48
    assert load_adapter(tmp_path / "ad" / f"{TASK}.safetensors").A.shape[0] == 2
    assert summary["out"] == str(tmp_path / "ad" / f"{TASK}.safetensors")
    # run again into the same folder: replaced whole, no adapter of the earlier run left
    (tmp_path / "ad" / "ni065_format_pert.safetensors").write_bytes(b"an earlier adapter")
    assert main(args) == 0
    assert [p.name for p in (tmp_path / "ad").iterdir()] == [f"{TASK}.safetensors"]
    # a folder holding other files is refused and left as it was
    (tmp_path / "ad" / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(args) == 2
    assert "holds notes.txt, not written by lora" in capsys.readouterr().err
    assert (tmp_path / "ad" / "notes.txt").read_text() == "mine"


def test_settings_are_checked() -> None:
    with pytest.raises(LoraError, match="lr must be > 0"):
        LoraSettings(lr=0.0)
    with pytest.raises(LoraError, match="epochs"):
        LoraSettings(epochs=0)
