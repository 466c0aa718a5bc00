"""Intermediate-layer debiasing: state collection, the hook context, the fit, files, CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.scoring.correction import CorrectionError
from lm_eval_robust.scoring.generation.fit import (
    LayerCorrection,
    apply_layer_correction,
    fit_layer_correction,
    load_layer_correction,
    save_layer_correction,
)
from lm_eval_robust.scoring.generation.layers import (
    collect_last_states,
    decoder_layers,
    layer_debias,
    resolve_layers,
    sweep_layers,
)

PROMPTS = [
    "Question: who wrote it?\nAnswer:",
    "Q: a\nA:",
    "Question: Options are here, and a longer question than the others?\nAnswer:",
    "Answer: 1 2 3",
]


@pytest.fixture(scope="module")
def lm(tiny_model_dir: Path):
    from lm_eval_robust.scoring.model import DebiasedHFLM

    return DebiasedHFLM(pretrained=str(tiny_model_dir), dtype="float32", device="cpu", batch_size=4)


def _tokens(lm, prompts=PROMPTS) -> list[list[int]]:
    from lm_eval_robust.scoring.generation.layers import encode_prompts

    return encode_prompts(lm, list(prompts), 8)


def _no_hooks(model: torch.nn.Module) -> bool:
    """No hook of ours on any module (transformers installs and keeps hooks of its own)."""
    for m in model.modules():
        for fn in [*m._forward_hooks.values(), *m._forward_pre_hooks.values()]:
            if getattr(fn, "__module__", "").startswith("lm_eval_robust"):
                return False
    return True


def _random_correction(lm, layer: int, scale: float, seed: int = 0, positions="prompt"):
    rng = np.random.default_rng(seed)
    n = lm.model.config.hidden_size
    h = rng.normal(size=(n, 1))
    h /= np.linalg.norm(h)
    return LayerCorrection(
        layer=layer,
        num_layers=len(decoder_layers(lm.model)),
        H=h,
        mu=rng.normal(size=n),
        W=rng.normal(size=(n + 1, 1)) * scale,
        beta=np.array([scale]),
        task="nq_open_text_pert",
        positions=positions,
        fingerprint=lm.fingerprint,
    )


def _requests(prompts, task="nq_open_text_pert", max_gen_toks=6):
    from lm_eval.api.instance import Instance

    return [
        Instance(
            "generate_until",
            {"prompt": p},
            (p, {"until": ["\n\n"], "max_gen_toks": max_gen_toks, "do_sample": False}),
            i,
            metadata=(task, i, 1),
        )
        for i, p in enumerate(prompts)
    ]


def test_resolve_layers() -> None:
    assert sweep_layers(18) == [0, 4, 9, 17]
    assert sweep_layers(2) == [0, 1]
    assert resolve_layers("sweep", 32) == [0, 8, 16, 31]
    assert resolve_layers("0,3", 4) == [0, 3]
    for bad in ("5", "x", "-9", "0,-1"):
        with pytest.raises(UserError) as info:
            resolve_layers(bad, 4)
        assert "\n" not in str(info.value)
    with pytest.raises(UserError, match="4 decoder layers"):
        resolve_layers(4, 4)


def test_batched_left_padded_states_equal_single(lm) -> None:
    toks = _tokens(lm)
    pad = lm.tokenizer.pad_token_id
    batched = collect_last_states(lm.model, toks, [0, 1], pad_id=pad, batch_size=4)
    for i, t in enumerate(toks):
        one = collect_last_states(lm.model, [t], [0, 1], pad_id=pad, batch_size=1)
        for L in (0, 1):
            np.testing.assert_allclose(batched[L][i], one[L][0], atol=1e-4)
    assert _no_hooks(lm.model)
    # the state at the last block is the model's own (pre-norm) last hidden state
    with torch.no_grad():
        ids = torch.tensor([toks[0]])
        hs = lm.model(input_ids=ids, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(batched[0][0], hs[1][0, -1].numpy(), atol=1e-4)


def test_hook_removed_after_exit_and_exception(lm) -> None:
    with layer_debias(lm.model, 1, lambda x: x) as counts:
        assert not _no_hooks(lm.model)
        lm.model(input_ids=torch.tensor([_tokens(lm)[0]]))
    assert counts["prompt"] == 1 and _no_hooks(lm.model)
    with pytest.raises(RuntimeError, match="boom"), layer_debias(lm.model, 0, lambda x: x):
        raise RuntimeError("boom")
    assert _no_hooks(lm.model)
    with pytest.raises(UserError, match="does not exist"), layer_debias(lm.model, 7, lambda x: x):
        pass


@pytest.mark.slow
def test_identity_correction_leaves_generation_unchanged(lm) -> None:
    corr = _random_correction(lm, 0, 0.0)
    corr.W[:] = 0.0
    corr.beta[:] = 0.0
    reqs = _requests(PROMPTS)
    plain = lm.generate_until(reqs, disable_tqdm=True)
    for positions in ("prompt", "generated", "all"):
        with apply_layer_correction(lm.model, corr, positions) as counts:
            same = lm.generate_until(reqs, disable_tqdm=True)
        assert same == plain
        assert counts["prompt" if positions == "prompt" else "generated"] > 0
    assert _no_hooks(lm.model)


@pytest.mark.slow
@pytest.mark.parametrize("positions", ["prompt", "generated", "all"])
def test_batched_left_padded_generation_equals_single(lm, positions: str) -> None:
    corr = _random_correction(lm, 0, 3.0, seed=1, positions=positions)
    reqs = _requests(PROMPTS)
    plain = lm.generate_until(reqs, disable_tqdm=True)
    with apply_layer_correction(lm.model, corr) as counts:
        batched = lm.generate_until(reqs, disable_tqdm=True)
    singles = []
    for r in reqs:
        with apply_layer_correction(lm.model, corr):
            singles.extend(lm.generate_until([r], disable_tqdm=True))
    assert batched == singles
    assert batched != plain  # the edit acts
    if positions == "prompt":
        assert counts == {"prompt": len(PROMPTS), "generated": 0}
    elif positions == "generated":
        assert counts["prompt"] == 0 and counts["generated"] > 0
    assert _no_hooks(lm.model)


def _synthetic(seed: int = 0, n: int = 12, m: int = 40, r: int = 6):
    """Clean states, and perturbed ones shifted along u by a linear function of x̂ plus noise."""
    rng = np.random.default_rng(seed)
    u = np.zeros(n)
    u[2] = 1.0
    xc = rng.normal(size=(m, n))
    pair = np.repeat(np.arange(m), r)
    noise = rng.normal(size=(m * r, n)) * 0.05
    amp = 2.0 + rng.normal(size=(m * r, 1))
    xp = xc[pair] + amp * u + noise
    groups = [f"ex{i}" for i in pair]
    return xc, xp, pair, groups, u


def test_fit_recovers_the_shift_direction_and_reduces_it() -> None:
    xc, xp, pair, groups, u = _synthetic()
    corr = fit_layer_correction(
        xc, xp, pair, groups, layer=1, num_layers=2, task="nq_open_text_pert", k=1, lam=None
    )
    assert abs(float(corr.H[:, 0] @ u)) > 0.99
    st = corr.stats
    assert st["top_k_shift_rms_after"] < 0.5 * st["top_k_shift_rms_before"]
    assert len(st["lambda_table"]) == 5
    # only the top-k coordinate moves: the edit is a multiple of h_1
    shift = corr.shift(xp[:5])
    resid = shift - np.outer(shift @ corr.H[:, 0], corr.H[:, 0])
    assert np.abs(resid).max() < 1e-9
    # the torch editor is the same map
    ed = corr.editor("cpu")(torch.tensor(xp[:5], dtype=torch.float32)).numpy()
    np.testing.assert_allclose(ed, xp[:5] + shift, atol=1e-4)


def test_fit_in_pca_basis_equals_fit_in_original_basis() -> None:
    from lm_eval_robust.scoring.fit.ridge import fit_ridge

    xc, xp, pair, groups, _ = _synthetic(1)
    corr = fit_layer_correction(xc, xp, pair, groups, layer=0, num_layers=2, task="t", k=1, lam=3.0)
    d = xp - xc[pair]
    _, _, vt = np.linalg.svd(d - d.mean(0))
    full_h = vt.T  # all n principal axes
    z = (xp - corr.mu) @ full_h  # Hᵀφ(x̂)
    rot = fit_ridge(z, d @ corr.H, lam=3.0)
    theta_rot = -(z @ rot.W[:-1] + rot.W[-1] + rot.beta)
    np.testing.assert_allclose(corr.shift(xp), theta_rot @ corr.H.T, atol=1e-8)


def test_fit_bad_inputs() -> None:
    xc, xp, pair, groups, _ = _synthetic()
    xp_nan = xp.copy()
    xp_nan[0, 0] = np.nan
    with pytest.raises(UserError, match="NaN"):
        fit_layer_correction(xc, xp_nan, pair, groups, layer=0, num_layers=2, task="t")
    with pytest.raises(UserError, match="k=99"):
        fit_layer_correction(xc, xp, pair, groups, layer=0, num_layers=2, task="t", k=99)
    with pytest.raises(UserError, match="do not match"):
        fit_layer_correction(xc[:, :3], xp, pair, groups, layer=0, num_layers=2, task="t")


def test_file_roundtrip_and_refusals(lm, tmp_path: Path) -> None:
    from lm_eval_robust.scoring.correction import load as load_classification
    from lm_eval_robust.scoring.generation.fit import check_layer_correction

    corr = _random_correction(lm, 1, 0.5)
    path = save_layer_correction(corr, tmp_path / "c.safetensors")
    assert [p.name for p in tmp_path.iterdir()] == ["c.safetensors"]  # no temp file left
    back = load_layer_correction(path)
    for name in ("H", "mu", "W", "beta"):
        np.testing.assert_array_equal(getattr(back, name), getattr(corr, name))
    assert (back.layer, back.positions, back.task) == (1, "prompt", "nq_open_text_pert")
    check_layer_correction(back, lm.fingerprint, lm.model)
    with pytest.raises(CorrectionError, match="layer_correction="):
        load_classification(path)
    other = dict(lm.fingerprint, head_sha256="0" * 16)
    with pytest.raises(CorrectionError, match="fitted for model"):
        check_layer_correction(back, other, lm.model)
    back.num_layers = 18
    with pytest.raises(CorrectionError, match="18 layers"):
        check_layer_correction(back, lm.fingerprint, lm.model)
    pkl = tmp_path / "c.pt"
    torch.save({"W": torch.zeros(2)}, pkl)
    with pytest.raises(CorrectionError, match="pickle"):
        load_layer_correction(pkl)


def test_model_arg_applies_per_task_and_leaves_no_hook(lm, tiny_model_dir: Path, tmp_path):
    from lm_eval_robust.scoring.model import DebiasedHFLM

    corr = _random_correction(lm, 0, 3.0, seed=1)
    save_layer_correction(corr, tmp_path / "nq.safetensors")
    dlm = DebiasedHFLM(
        pretrained=str(tiny_model_dir),
        dtype="float32",
        device="cpu",
        batch_size=4,
        layer_correction=str(tmp_path),
    )
    reqs = _requests(PROMPTS, task="nq_open_text_pert_train")
    out = dlm.generate_until(reqs, disable_tqdm=True)
    with apply_layer_correction(lm.model, corr):
        expected = lm.generate_until(_requests(PROMPTS), disable_tqdm=True)
    assert out == expected
    # the harness name (robust_ namespace) finds the same correction
    reqs = _requests(PROMPTS, task="robust_nq_open_text_pert")
    assert dlm.generate_until(reqs, disable_tqdm=True) == expected
    assert _no_hooks(dlm.model)
    with pytest.raises(CorrectionError, match="no layer correction for task"):
        dlm.generate_until(_requests(PROMPTS[:1], task="xsum_text_pert"), disable_tqdm=True)
    with pytest.raises(UserError, match="layer_positions"):
        DebiasedHFLM(
            pretrained=str(tiny_model_dir),
            device="cpu",
            layer_correction=str(tmp_path),
            layer_positions="everywhere",
        )


def test_cli_fit_layer_sweep(tiny_model_dir: Path, data_dir: Path, tmp_path: Path, capsys):
    import json

    from lm_eval_robust.cli import main

    md = json.dumps(
        {"n_examples": 14, "n_train": 6, "n_perturbations": 6, "n_fit_perturbations": 3}
    )
    base = ["fit", "--task", "nq_open_text_pert", "--pretrained", str(tiny_model_dir)]
    base += ["--model-args", "dtype=float32", "--metadata", md, "--batch-size", "8"]
    assert main([*base, "--layer", "sweep", "-o", str(tmp_path / "sweep")]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [x["layer"] for x in lines] == [0, 1]
    for layer in (0, 1):
        path = tmp_path / "sweep" / f"L{layer}" / "nq_open_text_pert.safetensors"
        corr = load_layer_correction(path)
        assert corr.layer == layer and corr.stats["n_pert"] == 6 * 3 and corr.k == 1
    assert main([*base, "--layer", "9", "-o", str(tmp_path / "x.safetensors")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the model's loading bar
    assert last.startswith("lm-eval-robust: error: layer 9 does not exist")
    assert main([*base, "--task", "ni065_text_pert", "--layer", "0", "-o", str(tmp_path)]) == 2
    assert "generation tasks" in capsys.readouterr().err
