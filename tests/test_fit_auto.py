"""``fit --method auto``: the correction kind chosen by grouped CV on train (stats/fit/auto.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from lm_eval_robust.report.replay import corrected_loglikelihoods
from lm_eval_robust.scoring.correction import load, save
from lm_eval_robust.scoring.debias import apply_correction
from lm_eval_robust.stats.fit import auto as auto_mod
from lm_eval_robust.stats.fit.auto import (
    CANDIDATES,
    AutoError,
    AutoSettings,
    auto_fit,
    choose,
    cross_validate,
    fold_assignment,
)
from lm_eval_robust.values.features import Features

TASK = "ni322_text_pert_train"  # a binary task (two label words)
N = 5  # hidden size of the synthetic features
FP = {
    "architecture": "LlamaForCausalLM",
    "model_type": "llama",
    "name_or_path": "fake/model",
    "hidden_size": N,
    "vocab_size": 50,
    "head_sha256": "0123456789abcdef",
    "head_bias_sha256": None,
    "tokenizer_sha256": "fedcba9876543210",
    "tokenizer_vocab_size": 50,
}


def _features(
    n_examples: int = 40,
    k: int = 4,
    *,
    shift: float = 0.0,
    shift_in_x: bool = False,
    share_1: float = 0.5,
    noise: float = 0.2,
    seed: int = 0,
) -> Features:
    """Binary features: clean prompts separable with margin ≥ 0.5 on ``z = logit1 − logit0``.

    Each perturbation moves ``z`` by ``−s`` (toward label 0) plus noise: ``s = shift`` for every
    perturbation, or with ``shift_in_x`` ``s`` drawn from [0, 2·shift] and written into the last
    column of ``x`` (so an input-dependent correction can undo it and a constant cannot).
    """
    rng = np.random.default_rng(seed)
    n1 = round(share_1 * n_examples)
    gold_ex = np.array([1] * n1 + [0] * (n_examples - n1))
    rng.shuffle(gold_ex)
    rows_x, rows_z, ex, pert, gold = [], [], [], [], []
    for e in range(n_examples):
        z0 = (1 if gold_ex[e] else -1) * rng.uniform(0.5, 2.0)
        for p in range(k + 1):
            s = 0.0
            if p:
                s = rng.uniform(0.0, 2.0 * shift) if shift_in_x else shift
            z = z0 - s + (rng.normal(0.0, noise) if p else 0.0)
            x = rng.normal(size=N)
            x[-1] = s if shift_in_x else x[-1]
            rows_x.append(x)
            rows_z.append(z)
            ex.append(f"e{e:03d}")
            pert.append(p)
            gold.append(gold_ex[e])
    z_arr = np.array(rows_z)
    logits = np.stack([-z_arr / 2, z_arr / 2], axis=1)
    rows = len(rows_z)
    return Features(
        task=TASK,
        x=np.array(rows_x, dtype=np.float32),
        label_logits=logits.astype(np.float32),
        label_token_ids=np.tile(np.array([7, 9]), (rows, 1)),
        pert_id=np.array(pert),
        gold=np.array(gold),
        example_id=np.array(ex, dtype=object),
        fingerprint=dict(FP),
        head_rows=rng.normal(size=(2, N)).astype(np.float32),
    )


def _row(table: list[dict], method: str) -> dict:
    return next(r for r in table if r["method"] == method)


def test_picks_the_input_dependent_correction_when_it_clearly_helps() -> None:
    feats = _features(shift=2.5, shift_in_x=True)
    corr = auto_fit(feats, AutoSettings())
    info = corr.stats["auto"]
    none = _row(info["table"], "none")
    chosen = _row(info["table"], info["chosen"])
    assert info["chosen"].startswith("ridge_")
    assert corr.method == "ridge" and corr.W is not None
    assert corr.stats["beta_rule"] == info["chosen"].removeprefix("ridge_")
    assert chosen["bac_pert"] > none["bac_pert"] + 0.1
    assert chosen["bac_clean"] >= none["bac_clean"] - 0.01
    # every row of the table is the best eligible one or below it
    for r in info["table"]:
        if r["eligible"]:
            assert r["bac_pert"] <= chosen["bac_pert"] + 1e-9


def test_refuses_a_method_that_lowers_clean_bac() -> None:
    # a constant shift the features do not reveal: undoing it on perturbed prompts moves the
    # clean prompts by as much, so every kind that raises perturbed BAC lowers clean BAC
    feats = _features(shift=2.0)
    table = cross_validate(feats, AutoSettings())
    none = next(s for s in table if s.method == "none")
    better_pert = [s for s in table if s.skipped is None and s.bac_pert > none.bac_pert + 0.05]
    assert better_pert, "the synthetic shift should be repairable on perturbed prompts"
    assert choose(table, AutoSettings()).method == "none"
    for s in better_pert:
        assert not s.eligible
        assert s.bac_clean < none.bac_clean - 0.01
    # with a margin that tolerates any clean loss the best perturbed BAC wins instead
    loose = choose(table, AutoSettings(clean_margin=1.0))
    assert loose.method != "none"
    assert loose.bac_pert == max(s.bac_pert for s in table if s.skipped is None)


def test_picks_none_when_every_correction_hurts_or_ties() -> None:
    # imbalanced labels and no perturbation effect: the mean logit is not a bias to remove
    feats = _features(n_examples=50, shift=0.0, share_1=0.9, noise=0.02, seed=3)
    corr = auto_fit(feats, AutoSettings())
    info = corr.stats["auto"]
    none = _row(info["table"], "none")
    assert info["chosen"] == "none" and corr.method == "none"
    assert corr.W is None and np.array_equal(corr.beta, np.zeros(2))
    for r in info["table"]:
        if r["skipped"] is None:
            assert r["bac_pert"] <= none["bac_pert"] + 1e-9, r["method"]
    assert _row(info["table"], "batch_calibration")["bac_pert"] < none["bac_pert"] - 0.01


def test_ties_go_to_the_simpler_kind() -> None:
    table = cross_validate(_features(shift=0.0, noise=0.01, seed=5), AutoSettings())
    for s in table:  # make every kind tie exactly
        if s.skipped is None:
            s.bac_clean_folds = [1.0] * len(s.bac_clean_folds)
            s.bac_pert_folds = [0.9] * len(s.bac_pert_folds)
    assert choose(table, AutoSettings()).method == "none"
    table[0].bac_pert_folds = [0.5] * len(table[0].bac_pert_folds)  # none now loses
    assert choose(table, AutoSettings()).method == CANDIDATES[1]


def test_folds_keep_every_example_in_one_fold_and_are_seeded() -> None:
    feats = _features(n_examples=23, k=3)
    fold = fold_assignment(feats, AutoSettings(seed=1))
    for e in np.unique(feats.example_id):
        assert len(set(fold[feats.example_id == e].tolist())) == 1, e
    assert set(fold.tolist()) == set(range(5))
    again = fold_assignment(feats, AutoSettings(seed=1))
    other = fold_assignment(feats, AutoSettings(seed=2))
    assert np.array_equal(fold, again)
    assert not np.array_equal(fold, other)


def test_no_example_is_split_between_fit_and_held_out(monkeypatch: pytest.MonkeyPatch) -> None:
    feats = _features(n_examples=20, k=3, shift=1.0)
    fitted: list[set[str]] = []
    held: list[set[str]] = []
    real_fit, real_bac = auto_mod._candidate_fit, auto_mod._held_out_bac

    def spy_fit(method: str, train: Features, settings: AutoSettings):  # type: ignore[no-untyped-def]
        fitted.append(set(train.example_id.tolist()))
        return real_fit(method, train, settings)

    def spy_bac(f: Features, bias: np.ndarray):  # type: ignore[no-untyped-def]
        held.append(set(f.example_id.tolist()))
        return real_bac(f, bias)

    monkeypatch.setattr(auto_mod, "_candidate_fit", spy_fit)
    monkeypatch.setattr(auto_mod, "_held_out_bac", spy_bac)
    cross_validate(feats, AutoSettings())
    everyone = set(feats.example_id.tolist())
    assert fitted and len(fitted) == len(held)
    for tr, ho in zip(fitted, held, strict=True):
        assert ho and not tr & ho
        assert tr | ho == everyone


def test_too_few_examples_is_one_line() -> None:
    feats = _features(n_examples=7)
    with pytest.raises(AutoError) as info:
        auto_fit(feats, AutoSettings(n_folds=5))
    msg = str(info.value)
    assert "\n" not in msg and "10 train examples" in msg and "--auto_folds" in msg
    auto_fit(feats, AutoSettings(n_folds=3))  # 7 examples are enough for 3 folds


def test_nan_in_features_is_one_line() -> None:
    feats = _features()
    feats.x[5, 2] = np.nan
    with pytest.raises(AutoError) as info:
        auto_fit(feats, AutoSettings())
    msg = str(info.value)
    assert "\n" not in msg and "NaN" in msg and "1 of" in msg


@pytest.mark.parametrize("margin", [-0.1, float("nan"), 2.0])
def test_bad_margin_is_refused(margin: float) -> None:
    with pytest.raises(AutoError, match="clean_margin"):
        AutoSettings(clean_margin=margin)


def test_the_file_records_the_choice_and_the_table(tmp_path: Path) -> None:
    feats = _features(n_examples=50, share_1=0.9, noise=0.02, seed=3)
    corr = auto_fit(feats, AutoSettings(seed=4))
    path = save(corr, tmp_path / "c.safetensors")
    back = load(path)
    info = back.stats["auto"]
    assert back.method == "none" == info["chosen"]
    assert info["seed"] == 4 and info["clean_margin"] == 0.01 and info["n_folds"] == 5
    assert [r["method"] for r in info["table"]] == list(CANDIDATES)
    for r in info["table"]:
        if r["skipped"] is None:
            assert len(r["bac_clean_folds"]) == len(r["bac_pert_folds"]) == 5
            assert r["bac_pert"] == pytest.approx(np.mean(r["bac_pert_folds"]))
    # the identity correction changes no logit, directly or through replay's formula
    lg = torch.from_numpy(feats.label_logits)
    out = apply_correction(back, torch.from_numpy(feats.x), lg)
    assert torch.equal(out, lg)
    ll = np.log(np.array([0.2, 0.3]))
    assert np.allclose(corrected_loglikelihoods(ll, np.zeros(2)), ll, atol=1e-12)


def test_constant_is_skipped_on_a_multi_label_task() -> None:
    feats = _features(n_examples=12, k=2)
    three = np.concatenate([feats.label_logits, feats.label_logits[:, :1] - 1.0], axis=1)
    feats.label_logits = three.astype(np.float32)
    feats.label_token_ids = np.tile(np.array([7, 9, 11]), (three.shape[0], 1))
    feats.head_rows = np.vstack([feats.head_rows, feats.head_rows[:1]])
    feats.task = "ni1297_text_pert_train"  # eight options in the real task; three here
    table = cross_validate(feats, AutoSettings(n_folds=3))
    const = next(s for s in table if s.method == "constant")
    assert const.skipped is not None and "binary" in const.skipped
    assert not const.bac_pert_folds


def _write(folder: Path, feats: Features) -> Path:
    folder.mkdir(parents=True)
    tensors = {
        "head_rows": feats.head_rows,
        "x": feats.x,
        "label_logits": feats.label_logits,
        "label_token_ids": feats.label_token_ids.astype(np.int64),
        "pert_id": feats.pert_id.astype(np.int64),
        "gold": feats.gold.astype(np.int64),
    }
    header = {
        "task": feats.task,
        "example_id": feats.example_id.tolist(),
        "pert_kind": ["text"] * len(feats.pert_id),
        "format_id": ["f"] * len(feats.pert_id),
        "fingerprint": feats.fingerprint,
        "label_score_dtype": "float32",
    }
    save_file(
        tensors, str(folder / "rank0.safetensors"), metadata={"lm_eval_robust": json.dumps(header)}
    )
    return folder


def test_cli_fit_method_auto(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lm_eval_robust.cli import main

    feats_dir = _write(tmp_path / "feats", _features(shift=2.5, shift_in_x=True))
    out = tmp_path / "corr.safetensors"
    argv = ["fit", "--task", "ni322_text_pert", "--features", str(feats_dir), "--method", "auto"]
    assert main([*argv, "--seed", "3", "-o", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    corr = load(out)
    assert printed["method"] == "auto" and printed["chosen"] == corr.stats["auto"]["chosen"]
    assert set(printed["cv"]) == set(CANDIDATES)
    assert corr.stats["auto"]["seed"] == 3 and "radii" in corr.stats


def test_cli_refuses_a_margin_without_auto(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lm_eval_robust.cli import main

    feats_dir = _write(tmp_path / "feats", _features())
    argv = ["fit", "--task", "ni322_text_pert", "--features", str(feats_dir)]
    assert main([*argv, "--clean_margin", "0.02", "-o", str(tmp_path / "c.safetensors")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--method auto" in err
    assert not (tmp_path / "c.safetensors").exists()


def test_export_of_the_identity_correction_changes_no_logit(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_robust.cli import main
    from lm_eval_robust.scoring.correction import Correction
    from lm_eval_robust.scoring.fingerprint import model_fingerprint

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    corr = Correction(
        method="none",
        W=None,
        beta=np.zeros(2),
        label_token_ids=[11, 17],
        labels=["a", "b"],
        task="ni322_text_pert",
        fingerprint=model_fingerprint(model, tok),
    )
    cpath = save(corr, tmp_path / "none.safetensors")
    out = tmp_path / "out"
    argv = ["export", "--pretrained", str(tiny_model_dir), "--correction", str(cpath)]
    assert main([*argv, "-o", str(out)]) == 0
    exported = AutoModelForCausalLM.from_pretrained(out).eval()
    inps = torch.randint(3, 200, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(exported(inps).logits, model(inps).logits)
    assert not (out / "modeling_lm_eval_robust.py").exists()  # no bias needed: nothing to add
    assert json.loads((out / "lm_eval_robust_export.json").read_text())["method"] == "none"
