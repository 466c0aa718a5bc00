"""Correction files: round trip, atomic write, clear errors, fingerprints, apply == merged head."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from lm_eval_robust.scoring import correction as corr_mod
from lm_eval_robust.scoring.correction import (
    META_KEY,
    Correction,
    CorrectionError,
    check_fingerprint,
    load,
    save,
)
from lm_eval_robust.scoring.debias import apply_correction, merged_head_update
from lm_eval_robust.scoring.fingerprint import model_fingerprint
from lm_eval_robust.scoring.fit.ridge import fit_ridge

N, D = 12, 3
FP = {
    "architecture": "TinyForCausalLM",
    "model_type": "tiny",
    "name_or_path": "tiny/model",
    "hidden_size": N,
    "vocab_size": 50,
    "head_sha256": "0123456789abcdef",
    "head_bias_sha256": None,
    "tokenizer_sha256": "fedcba9876543210",
    "tokenizer_vocab_size": 50,
}


def _ridge_correction(psi: str = "linear", seed: int = 0) -> Correction:
    rng = np.random.default_rng(seed)
    extra = 1 if psi == "linear" else 2
    return Correction(
        method="ridge",
        W=rng.normal(size=(N + extra, D)),
        beta=rng.normal(size=D),
        label_token_ids=[5, 17, 3],
        labels=["A", "B", "C"],
        task="ni_task065_format",
        psi=psi,
        lam=0.25,
        alpha=-0.05,
        fingerprint=dict(FP),
        stats={"n_rows": np.int64(400), "bac": np.float64(0.75), "curve": np.arange(3.0)},
    )


# ---------------------------------------------------------------------------------------------
# save / load


@pytest.mark.parametrize("psi", ["linear", "norm"])
def test_round_trip_exact(tmp_path, psi):
    c = _ridge_correction(psi)
    path = save(c, tmp_path / "c.safetensors")
    back = load(path)
    assert back.W is not None and c.W is not None
    assert back.W.dtype == np.float64 and back.beta.dtype == np.float64
    np.testing.assert_array_equal(back.W, c.W)
    np.testing.assert_array_equal(back.beta, c.beta)
    assert (back.method, back.task, back.psi, back.lam, back.alpha) == (
        "ridge",
        "ni_task065_format",
        psi,
        0.25,
        -0.05,
    )
    assert back.label_token_ids == [5, 17, 3] and back.labels == ["A", "B", "C"]
    assert back.fingerprint == FP
    assert back.stats == {"n_rows": 400, "bac": 0.75, "curve": [0.0, 1.0, 2.0]}
    assert back.created_by == c.created_by and back.created_by.startswith("lm-eval-robust")
    # one file; the metadata is JSON under our key
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as fh:
        meta = fh.metadata()
        assert set(fh.keys()) == {"W", "beta"}
    assert set(meta) == {META_KEY}
    assert json.loads(meta[META_KEY])["task"] == "ni_task065_format"


def test_round_trip_constant_and_from_fit(tmp_path):
    c = Correction(
        method="constant",
        W=None,
        beta=np.array([-0.4, 0.4]),
        label_token_ids=[1, 2],
        labels=["no", "yes"],
        task="t",
        fingerprint=dict(FP),
    )
    back = load(save(c, tmp_path / "const.safetensors"))
    assert back.W is None and back.method == "constant"
    np.testing.assert_array_equal(back.beta, [-0.4, 0.4])
    rng = np.random.default_rng(1)
    fit = fit_ridge(rng.normal(size=(50, N)), rng.normal(size=(50, 2)), lam=1.0)
    rc = Correction.from_ridge(
        fit, label_token_ids=[1, 2], labels=["no", "yes"], task="t", fingerprint=FP
    )
    back = load(save(rc, tmp_path / "r.safetensors"))
    assert back.W is not None
    np.testing.assert_array_equal(back.W, fit.W)
    assert back.stats["n_rows"] == 50 and back.lam == 1.0


def test_atomic_write_leaves_no_temp_files(tmp_path, monkeypatch):
    target = tmp_path / "c.safetensors"
    save(_ridge_correction(seed=0), target)
    save(_ridge_correction(seed=1), target)  # overwrite in place
    assert os.listdir(tmp_path) == ["c.safetensors"]
    before = target.read_bytes()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(corr_mod.os, "replace", boom)
    with pytest.raises(CorrectionError, match=r"cannot write correction .*disk full.*unchanged"):
        save(_ridge_correction(seed=2), target)
    assert os.listdir(tmp_path) == ["c.safetensors"]  # temp file removed
    assert target.read_bytes() == before  # old file untouched
    monkeypatch.undo()
    # an invalid correction is refused before anything is written
    bad = _ridge_correction()
    bad.beta = np.zeros(2)
    with pytest.raises(CorrectionError, match="beta has 2 entries"):
        save(bad, tmp_path / "bad.safetensors")
    assert os.listdir(tmp_path) == ["c.safetensors"]


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(CorrectionError, match="correction file not found"):
        load(tmp_path / "nope.safetensors")
    with pytest.raises(CorrectionError, match="is a directory"):
        load(tmp_path)


def test_pickle_files_are_named(tmp_path):
    p1 = tmp_path / "c.safetensors"
    with open(p1, "wb") as fh:
        pickle.dump({"W": np.zeros((3, 2))}, fh)
    p2 = tmp_path / "c.pt"
    torch.save({"W": torch.zeros(3, 2)}, p2)
    p3 = tmp_path / "model.bin"
    p3.write_bytes(b"not really anything")
    for p in (p1, p2, p3):
        with pytest.raises(CorrectionError) as e:
            load(p)
        msg = str(e.value)
        assert "\n" not in msg
        assert msg == (
            f"{p} is a pickle file; corrections are safetensors files written by "
            "`lm-eval-robust fit`"
        )


def test_truncated_and_corrupt_files(tmp_path):
    good = save(_ridge_correction(), tmp_path / "good.safetensors").read_bytes()
    cases = {
        "trunc_data.safetensors": good[:-40],
        "trunc_header.safetensors": good[:30],
        "tiny.safetensors": b"\x01\x02",
        "garbage.safetensors": os.urandom(300),
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(
            CorrectionError, match=r"is not a valid safetensors file \(truncated or corrupt"
        ):
            load(p)


def test_missing_metadata_and_wrong_shapes(tmp_path):
    p = tmp_path / "plain.safetensors"
    save_file({"beta": np.zeros(3)}, str(p))
    with pytest.raises(CorrectionError, match="has no 'lm_eval_robust' metadata"):
        load(p)

    c = _ridge_correction()
    meta = corr_mod._metadata(c)
    p2 = tmp_path / "shape.safetensors"
    save_file({"W": np.zeros((N + 5, D)), "beta": np.zeros(D)}, str(p2), metadata={META_KEY: meta})
    with pytest.raises(
        CorrectionError, match=r"W has shape \(17, 3\) but psi='linear' with hidden size 12"
    ):
        load(p2)
    p3 = tmp_path / "beta.safetensors"
    save_file(
        {"W": np.zeros((N + 1, D)), "beta": np.zeros(D + 1)}, str(p3), metadata={META_KEY: meta}
    )
    with pytest.raises(CorrectionError, match="beta has 4 entries but there are 3 label token ids"):
        load(p3)
    p4 = tmp_path / "now.safetensors"
    save_file({"beta": np.zeros(D)}, str(p4), metadata={META_KEY: meta})
    with pytest.raises(CorrectionError, match="'W' tensor is missing"):
        load(p4)
    p5 = tmp_path / "json.safetensors"
    save_file({"beta": np.zeros(D)}, str(p5), metadata={META_KEY: "{not json"})
    with pytest.raises(CorrectionError, match="not valid JSON"):
        load(p5)


# ---------------------------------------------------------------------------------------------
# fingerprints


@pytest.fixture(scope="module")
def tiny():
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")

    def tokenizer(extra: str | None = None):
        vocab = {f"t{i}": i for i in range(32)}
        vocab["[UNK]"] = 32
        if extra:
            vocab[extra] = 33
        tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
        tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
        return transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")

    def model(seed: int, hidden: int = 16):
        torch.manual_seed(seed)
        cfg = transformers.LlamaConfig(
            vocab_size=34,
            hidden_size=hidden,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
        return transformers.LlamaForCausalLM(cfg).eval()

    return model, tokenizer


def _fitted_for(fp):
    return Correction(
        method="ridge",
        W=np.zeros((fp["hidden_size"] + 1, 2)),
        beta=np.zeros(2),
        label_token_ids=[4, 9],
        labels=["no", "yes"],
        task="task_a",
        fingerprint=fp,
    )


def test_fingerprint_matches_and_mismatches(tiny):
    model, tokenizer = tiny
    m0, tok = model(0), tokenizer()
    fp = model_fingerprint(m0, tok)
    assert fp["hidden_size"] == 16 and fp["vocab_size"] == 34
    assert len(fp["head_sha256"]) == 16 and len(fp["tokenizer_sha256"]) == 16
    assert fp["architecture"] == "llama" and fp["head_bias_sha256"] is None
    assert model_fingerprint(model(0), tokenizer()) == fp  # deterministic
    c = _fitted_for(fp)
    check_fingerprint(c, fp, task="task_a", label_token_ids=[4, 9])  # passes

    other = model_fingerprint(model(1), tok)
    with pytest.raises(CorrectionError) as e:
        check_fingerprint(c, other)
    msg = str(e.value)
    assert "head_sha256" in msg and fp["head_sha256"][:8] in msg and other["head_sha256"][:8] in msg
    assert "hidden_size" not in msg and "\n" not in msg
    assert (
        msg.startswith("correction was fitted for model") and "re-run `lm-eval-robust fit`" in msg
    )

    wider = model_fingerprint(model(0, hidden=32), tok)
    with pytest.raises(CorrectionError, match=r"hidden_size 16 vs 32.*for this model"):
        check_fingerprint(c, wider)

    fp_tok = model_fingerprint(m0, tokenizer(extra="zz"))
    with pytest.raises(CorrectionError, match="tokenizer_sha256") as e:
        check_fingerprint(c, fp_tok)
    assert "head_sha256" not in str(e.value)


def test_other_task_or_labels_refused():
    c = _fitted_for(dict(FP))
    with pytest.raises(
        CorrectionError, match="fitted for task 'task_a' but is applied to task 'task_b'"
    ):
        check_fingerprint(c, dict(FP), task="task_b")
    with pytest.raises(
        CorrectionError, match=r"label token ids \[4, 9\].*this task's label token ids \[9, 4\]"
    ):
        check_fingerprint(c, dict(FP), label_token_ids=[9, 4])
    bare = _fitted_for(dict(FP))
    bare.fingerprint = {}
    with pytest.raises(CorrectionError, match="carries no model fingerprint"):
        check_fingerprint(bare, dict(FP))


# ---------------------------------------------------------------------------------------------
# apply / merge


def _numpy_formula(c: Correction, hidden: np.ndarray, logits: np.ndarray) -> np.ndarray:
    h = hidden.astype(np.float64)
    psi = [h]
    if c.psi == "norm":
        psi.append(np.linalg.norm(h, axis=1, keepdims=True))
    psi.append(np.ones((h.shape[0], 1)))
    assert c.W is not None
    return logits.astype(np.float64) - (np.concatenate(psi, axis=1) @ c.W + c.beta)


@pytest.mark.parametrize("psi", ["linear", "norm"])
def test_apply_correction_equals_numpy_formula(psi):
    c = _ridge_correction(psi)
    rng = np.random.default_rng(3)
    hidden = rng.normal(size=(5, N)) * 3
    logits = rng.normal(size=(5, D)) * 10
    out = apply_correction(c, torch.tensor(hidden, dtype=torch.float32), torch.tensor(logits))
    assert out.dtype == torch.float32 and out.shape == (5, D)
    np.testing.assert_allclose(out.numpy(), _numpy_formula(c, hidden, logits), rtol=1e-5, atol=1e-4)
    # bf16 inputs are computed in float32 too
    out16 = apply_correction(c, torch.tensor(hidden).bfloat16(), torch.tensor(logits).bfloat16())
    assert out16.dtype == torch.float32
    with pytest.raises(CorrectionError, match="hidden size 12"):
        apply_correction(c, torch.zeros(5, N + 1), torch.zeros(5, D))
    with pytest.raises(CorrectionError, match="3 labels"):
        apply_correction(c, torch.zeros(5, N), torch.zeros(5, D + 1))


@pytest.mark.parametrize("with_bias", [True, False])
def test_merged_head_equals_apply_correction(with_bias):
    torch.manual_seed(0)
    vocab = 40
    head = torch.nn.Linear(N, vocab, bias=with_bias)
    c = _ridge_correction("linear")
    ids = c.label_token_ids
    hidden = torch.randn(7, N)
    with torch.no_grad():
        label_logits = head(hidden)[:, ids]
        expected = apply_correction(c, hidden, label_logits)
        rows, bias = merged_head_update(c, head.weight, head.bias)
        assert rows.shape == (D, N) and bias.shape == (D,)
        merged = torch.nn.Linear(N, vocab, bias=True)
        merged.weight.copy_(head.weight)
        merged.bias.copy_(head.bias if head.bias is not None else torch.zeros(vocab))
        merged.weight[ids] = rows
        merged.bias[ids] = bias
        got = merged(hidden)[:, ids]
        others = [t for t in range(vocab) if t not in ids]
        np.testing.assert_allclose(merged(hidden)[:, others], head(hidden)[:, others], atol=1e-6)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_merge_constant_and_norm_refused():
    head = torch.nn.Linear(N, 20, bias=False)
    const = Correction(
        method="constant",
        W=None,
        beta=np.array([-0.5, 0.5]),
        label_token_ids=[2, 6],
        labels=["no", "yes"],
        task="t",
    )
    rows, bias = merged_head_update(const, head.weight, None)
    hidden = torch.randn(4, N)
    with torch.no_grad():
        np.testing.assert_allclose(
            (hidden @ rows.T + bias).numpy(),
            apply_correction(const, hidden, head(hidden)[:, [2, 6]]).numpy(),
            atol=1e-6,
        )
    with pytest.raises(CorrectionError, match="not mergeable"):
        merged_head_update(_ridge_correction("norm"), head.weight, None)
