"""Label scores in float32 whatever the model's dtype, ties scored 1/k, resumable runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lm_eval_robust.scoring.label_scores import Float32LabelScorer, LabelScoreError
from lm_eval_robust.stats.classification import acc_pert, bac_clean, bac_pert, tie_share
from lm_eval_robust.values.ties import is_tied, pred_shares, tie_credit


class _Head(torch.nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.lm_head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(weight)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.lm_head


def test_scorer_breaks_a_bf16_tie() -> None:
    """x = 1; row a sums to 32, row b to 32.125: bf16 (spacing 0.25 at 32) ties them."""
    n = 32
    w = torch.ones(3, n)
    w[1, 0] = 1.125  # exactly representable in bf16
    w[2] = -1.0
    head = _Head(w).to(torch.bfloat16)
    x = torch.ones(1, 1, n, dtype=torch.bfloat16)
    bf16 = head.lm_head(x)
    assert bf16[0, 0, 0] == bf16[0, 0, 1]  # the model's own logits tie
    ours = Float32LabelScorer(head).scores(bf16, x)
    assert ours.dtype == torch.float32
    assert float(ours[0, 0, 1] - ours[0, 0, 0]) == pytest.approx(0.125)


def test_scorer_refuses_a_head_it_cannot_reproduce() -> None:
    w = torch.randn(5, 8)
    head = _Head(w).to(torch.bfloat16)
    x = torch.randn(1, 1, 8).to(torch.bfloat16)
    scaled = head.lm_head(x) * 3  # a model that rescales its logits after the head
    with pytest.raises(LabelScoreError, match="dtype=float32"):
        Float32LabelScorer(head).scores(scaled, x)


def test_scorer_applies_softcapping() -> None:
    w = torch.randn(5, 8) * 4
    head = _Head(w).to(torch.bfloat16)
    head.config = type("C", (), {"final_logit_softcapping": 2.0})()  # type: ignore[assignment]
    x = torch.randn(1, 1, 8).to(torch.bfloat16)
    capped = torch.tanh(head.lm_head(x).float() / 2.0) * 2.0
    ours = Float32LabelScorer(head).scores(capped.to(torch.bfloat16), x)
    assert torch.allclose(ours, capped, atol=2e-2)
    assert float(ours.abs().max()) <= 2.0


def _requests(task_names: list[str], limit: int) -> list:
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    tm = TaskManager(
        include_path=lm_eval_robust.task_dir(),
        include_defaults=False,
        metadata={"n_perturbations": 2, "n_examples": 20},
    )
    reqs = []
    for _name, task in sorted(tm.load(task_names)["tasks"].items()):
        task.build_all_requests(limit=limit, rank=0, world_size=1)
        reqs += list(task.instances)
    return reqs


def _label_pairs(lm, requests) -> list[int]:
    toks = set()
    for r in requests:
        ctx, cont = r.args
        toks.add(lm._encode_pair(ctx, cont)[1][-1])
    return sorted(toks)


def test_debiased_hf_bf16_ties_broken(tiny_model_dir: Path, data_dir: Path) -> None:
    """Label rows that differ by less than bf16 resolves: the harness's hf model ties most label
    pairs, debiased_hf ties none and orders them as the float32 logits do."""
    from lm_eval.models.huggingface import HFLM

    from lm_eval_robust.scoring.model import DebiasedHFLM

    reqs = _requests(["ni322_format_pert"], limit=8)
    kw = dict(pretrained=str(tiny_model_dir), batch_size=4, dtype="bfloat16", device="cpu")
    hf, ours = HFLM(**kw), DebiasedHFLM(**kw)
    labels = _label_pairs(ours, reqs)
    assert len(labels) == 2
    a, b = labels
    gen = torch.Generator().manual_seed(0)
    for lm in (hf, ours):
        head = lm.model.get_output_embeddings()
        with torch.no_grad():
            w = head.weight.float()
            w[a] = w[a] * 64  # large logits: bf16 spacing 0.25-1
            w[b] = w[a] + 0.002 * torch.randn(w.shape[1], generator=gen)  # tiny difference
            gen.manual_seed(0)
            head.weight.copy_(w.to(head.weight.dtype))
    ref = np.array([r[0] for r in hf.loglikelihood(reqs, disable_tqdm=True)]).reshape(-1, 2)
    got = np.array([r[0] for r in ours.loglikelihood(reqs, disable_tqdm=True)]).reshape(-1, 2)
    assert (ref[:, 0] == ref[:, 1]).sum() >= len(ref) // 2  # the bf16 head ties them
    assert not (got[:, 0] == got[:, 1]).any()
    assert np.allclose(got, ref, atol=0.5)  # the same scores up to bf16 rounding
    info = ours.get_model_info()
    assert info["label_score_dtype"] == "float32"


def test_fast_path_feeds_the_harness_cache(tiny_model_dir: Path, data_dir: Path) -> None:
    """Every fast-path result goes to the --use_cache hook as it is computed (resumable runs)."""
    from lm_eval_robust.scoring.model import DebiasedHFLM

    reqs = _requests(["ni322_format_pert"], limit=6)
    lm = DebiasedHFLM(pretrained=str(tiny_model_dir), batch_size=2, dtype="float32", device="cpu")
    seen: list[tuple[str, tuple[str, str], tuple[float, bool]]] = []

    class Hook:
        dbdict = None

        def add_partial(self, attr, req, res):
            seen.append((attr, req, res))

    lm.cache_hook = Hook()  # type: ignore[assignment]
    out = lm.loglikelihood(reqs, disable_tqdm=True)
    assert len(seen) == len(reqs)
    by_args = {s[1]: s[2] for s in seen}
    assert [by_args[r.args] for r in reqs] == out


def test_features_with_use_cache_refused(tiny_model_dir: Path, data_dir: Path, tmp_path) -> None:
    """Refused when the harness hands over the cache, whatever it holds (here: nothing)."""
    from lm_eval.api.model import CachingLM

    from lm_eval_robust.scoring.cache_keys import CacheKeyError
    from lm_eval_robust.scoring.model import DebiasedHFLM

    lm = DebiasedHFLM(
        pretrained=str(tiny_model_dir),
        dtype="float32",
        device="cpu",
        collect_features=str(tmp_path / "f"),
    )
    with pytest.raises(
        CacheKeyError, match="collect_features= cannot be combined with --use_cache"
    ):
        CachingLM(lm, str(tmp_path / "empty.db"))
    assert not list((tmp_path / "f").rglob("*.safetensors"))


def test_ties_get_one_over_k() -> None:
    ll = np.array([[-1.0, -1.0, -3.0], [-1.0, -1.0, -1.0], [-2.0, -1.0, -3.0], [np.nan, 0, 0]])
    shares = pred_shares(ll)
    assert shares[0].tolist() == [0.5, 0.5, 0.0]
    assert np.allclose(shares[1], 1 / 3)
    assert shares[2].tolist() == [0.0, 1.0, 0.0]
    assert shares[3].tolist() == [0.0, 0.0, 0.0]
    assert tie_credit(ll, np.array([1, 2, 1, 0])).tolist() == pytest.approx([0.5, 1 / 3, 1, 0])
    assert is_tied(ll).tolist() == [True, True, False, False]


def _item(ex: str, pert: int, gold: int, ll: list[float]) -> dict:
    pred = int(np.argmax(ll))
    return {"task": "t", "example_id": ex, "pert_id": pert, "gold": gold, "pred": pred, "ll": ll}


def test_bac_scores_a_tie_as_half() -> None:
    """Gold 1 tied with label 0 earns 1/2 (the first label no longer wins the tie)."""
    items = [
        _item("a", 0, 1, [-1.0, -1.0]),
        _item("b", 0, 0, [-0.5, -2.0]),
        _item("a", 1, 1, [-1.0, -1.0]),
        _item("a", 2, 1, [-3.0, -1.0]),
        _item("b", 1, 0, [-1.0, -1.0]),
        _item("b", 2, 0, [-0.5, -3.0]),
    ]
    assert bac_clean(items) == pytest.approx((0.5 + 1.0) / 2)
    assert bac_pert(items) == pytest.approx(((0.5 + 1.0) / 2 + (0.5 + 1.0) / 2) / 2)
    assert acc_pert(items) == pytest.approx((0.5 + 1.0 + 0.5 + 1.0) / 4)
    assert tie_share(items) == pytest.approx(3 / 6)


def test_a_killed_run_resumes_from_the_harness_cache(
    tiny_model_dir: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after two batches, the same requests through lm-eval's CachingLM (--use_cache)
    recompute only the rows that were not finished, and give the same results."""
    from lm_eval.api.model import CachingLM

    from lm_eval_robust.scoring.model import DebiasedHFLM

    reqs = _requests(["ni322_format_pert"], limit=12)
    lm = DebiasedHFLM(pretrained=str(tiny_model_dir), batch_size=2, dtype="float32", device="cpu")
    want = lm.loglikelihood(reqs, disable_tqdm=True)
    calls = {"n": 0}
    real = lm._forward_last

    def dies_after_two(inputs, n_keep):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt  # the kill
        return real(inputs, n_keep)

    db = str(tmp_path / "cache" / "lm.db")
    monkeypatch.setattr(lm, "_forward_last", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        CachingLM(lm, db).loglikelihood(reqs)
    rows_done = 2 * 2  # two batches of two forward rows
    monkeypatch.setattr(lm, "_forward_last", real)
    seen: list[int] = []

    def counting(inputs, n_keep):
        seen.append(len(inputs))
        return real(inputs, n_keep)

    monkeypatch.setattr(lm, "_forward_last", counting)
    got = CachingLM(lm, db).loglikelihood(reqs)
    assert got == want
    n_rows = len({tuple(lm._encode_pair(*r.args)[0]) for r in reqs})  # one row per prompt
    assert sum(seen) == n_rows - rows_done


def test_rescoring_checks_each_value_against_its_rounding(tmp_path: Path) -> None:
    from lm_eval_robust.scoring.feature_shards import FeatureFileError
    from lm_eval_robust.values.features import rescore_label_logits

    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 16)).astype(np.float32)
    head = rng.normal(size=(2, 16)).astype(np.float32) * 3
    exact = x @ head.T
    recorded = torch.from_numpy(exact).to(torch.bfloat16).float().numpy()
    ids = np.tile(np.array([[4, 7]]), (50, 1))
    got = rescore_label_logits(tmp_path, x, recorded, ids, head)
    assert np.allclose(got, exact, atol=1e-5)
    with pytest.raises(FeatureFileError, match="more than their rounding"):
        rescore_label_logits(tmp_path, x, recorded, ids, head * 1.01)  # a 1 % wrong head


def test_one_estimation_variant_certifies_nothing() -> None:
    from lm_eval_robust.stats.certificates import certify
    from lm_eval_robust.stats.margins import MarginTable

    items = []
    for e in range(5):
        items.append(_item(f"e{e}", 0, 0, [0.0, -1.0]))
        items.append(_item(f"e{e}", 1, 0, [0.0, -2.0]))
    cert = certify(MarginTable.from_items(items))
    assert np.isnan(cert.p_h) and np.isnan(cert.p_c) and "fewer than 2" in cert.note
