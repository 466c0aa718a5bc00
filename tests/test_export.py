"""export: the saved checkpoint loads with AutoModelForCausalLM and gives the debiased logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch


def _model_dir(src: Path, dst: Path, tied: bool) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    base = AutoModelForCausalLM.from_pretrained(src)
    cfg = base.config
    cfg.tie_word_embeddings = tied
    torch.manual_seed(1)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(dst)
    AutoTokenizer.from_pretrained(src).save_pretrained(dst)
    return dst


def _correction(model_dir: Path, path: Path, constant: bool) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_robust.scoring.correction import Correction, save
    from lm_eval_robust.scoring.fingerprint import model_fingerprint

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    n = model.config.hidden_size
    rng = np.random.default_rng(0)
    w = rng.normal(scale=0.1, size=(n + 1, 2))
    beta = rng.normal(size=2)
    if not constant:
        w[n] = 0.0
        beta[:] = 0.0
    corr = Correction(
        method="ridge",
        W=w,
        beta=beta,
        label_token_ids=[11, 17],
        labels=["a", "b"],
        task="ni322_format_pert",
        fingerprint=model_fingerprint(model, tok),
    )
    return save(corr, path)


@pytest.mark.parametrize(("tied", "constant"), [(False, True), (True, True), (True, False)])
def test_exported_model_gives_debiased_logits(
    tiny_model_dir: Path, tmp_path: Path, tied: bool, constant: bool
) -> None:
    from transformers import AutoModelForCausalLM

    from lm_eval_robust.cli import main
    from lm_eval_robust.scoring.correction import load
    from lm_eval_robust.scoring.debias import apply_correction
    from lm_eval_robust.scoring.model import last_positions_head

    src = _model_dir(tiny_model_dir, tmp_path / "src", tied)
    cpath = _correction(src, tmp_path / "c.safetensors", constant)
    out = tmp_path / "out"
    assert (
        main(["export", "--pretrained", str(src), "--correction", str(cpath), "-o", str(out)]) == 0
    )

    orig = AutoModelForCausalLM.from_pretrained(src).eval()
    exported = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    assert not exported.config.tie_word_embeddings
    torch.testing.assert_close(
        exported.get_input_embeddings().weight, orig.get_input_embeddings().weight
    )
    inps = torch.randint(3, 200, (3, 9))
    pos = torch.full((3, 1), 8)
    with torch.no_grad(), last_positions_head(orig, pos) as cap:
        raw = orig(inps).logits[:, -1]
    with torch.no_grad():
        got = exported(inps).logits[:, -1]
    corr = load(cpath)
    ids = corr.label_token_ids
    expected = apply_correction(corr, cap["hidden"][:, -1], raw[:, ids])
    torch.testing.assert_close(got[:, ids], expected, atol=1e-4, rtol=1e-4)
    others = [i for i in range(raw.shape[1]) if i not in ids]
    torch.testing.assert_close(got[:, others], raw[:, others], atol=1e-5, rtol=1e-5)
    # custom code only when a constant must live in a bias the architecture lacks
    assert (out / "modeling_lm_eval_robust.py").exists() == constant


def test_the_exported_head_corrects_every_position(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Merged rows act wherever the head runs, not only at the answer position: the label
    logits are corrected at every position, so the softmax of an earlier token (Gemma's "▁" of
    " 1") moves by -log(1 - Σp + Σp e^{-b}) there, which debiased_hf (answer position only) does
    not do. docs/engines.md ("Parity") measures this as the merged-ridge gap on vLLM."""
    from transformers import AutoModelForCausalLM

    from lm_eval_robust.scoring.correction import load
    from lm_eval_robust.scoring.debias import apply_correction, corrected_label_logprobs
    from lm_eval_robust.scoring.export import export
    from lm_eval_robust.scoring.model import last_positions_head

    src = _model_dir(tiny_model_dir, tmp_path / "src", tied=True)
    cpath = _correction(src, tmp_path / "c.safetensors", constant=False)
    out = export(str(src), str(cpath), str(tmp_path / "out"), dtype="float32", constant="offset")
    orig = AutoModelForCausalLM.from_pretrained(src).eval()
    exported = AutoModelForCausalLM.from_pretrained(out).eval()
    inps = torch.randint(3, 200, (2, 9))
    pos = torch.arange(9).expand(2, 9)
    with torch.no_grad(), last_positions_head(orig, pos) as cap:
        raw = orig(inps).logits.double()
    with torch.no_grad():
        got = exported(inps).logits.double()
    corr = load(cpath)
    ids = corr.label_token_ids
    fixed = apply_correction(corr, cap["hidden"], raw[..., ids].float()).double()
    torch.testing.assert_close(got[..., ids], fixed, atol=1e-4, rtol=1e-4)
    # an earlier position's token that is no label: its log-probability moves by the label
    # tokens' renormalisation alone, as predicted from the original model
    lp_raw, lp_got = raw.log_softmax(-1), got.log_softmax(-1)
    b = (raw[..., ids] - fixed).numpy()
    other = next(t for t in range(3, 200) if t not in ids)
    for r in range(2):
        for t in range(8):
            lab = lp_raw[r, t, ids].numpy()
            shift = corrected_label_logprobs(lab, b[r, t]) - (lab - b[r, t])
            want = float(lp_raw[r, t, other]) + float(shift[0])
            assert float(lp_got[r, t, other]) == pytest.approx(want, abs=1e-4)
    assert float((lp_got[..., other] - lp_raw[..., other]).abs().max()) > 1e-3  # it moved


def test_export_refuses_position_corrections(tiny_model_dir: Path, tmp_path: Path) -> None:
    from lm_eval_robust.scoring.correction import CorrectionError, load, save
    from lm_eval_robust.scoring.export import export

    cpath = _correction(tiny_model_dir, tmp_path / "c.safetensors", True)
    corr = load(cpath)
    corr.stats["labels_are_positions"] = True
    save(corr, cpath)
    with pytest.raises(CorrectionError, match="option positions"):
        export(str(tiny_model_dir), str(cpath), str(tmp_path / "out"))
