"""``--use_cache`` keyed by every setting that changes a score
(:mod:`lm_eval_robust.scoring.cache_keys`), and prompts past ``max_length`` refused instead of
scored cut short."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_bad_inputs import _correction
from test_label_scores import _requests

TASK = "ni322_format_pert"


def _lm(model_dir: Path, **kw: Any) -> Any:
    from lm_eval_robust.scoring.model import DebiasedHFLM

    return DebiasedHFLM(
        pretrained=str(model_dir), batch_size=4, dtype="float32", device="cpu", **kw
    )


def _counting(lm: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows each forward pass of ``lm`` runs."""
    seen: list[int] = []
    real = lm._forward_last

    def counting(inputs: Any, n_keep: Any) -> Any:
        seen.append(len(inputs))
        return real(inputs, n_keep)

    monkeypatch.setattr(lm, "_forward_last", counting)
    return seen


def _labels(lm: Any, reqs: list[Any]) -> list[int]:
    """The label tokens of the first doc, in the order of its choices."""
    first = [r for r in reqs if r.doc_id == reqs[0].doc_id]
    return [lm._encode_pair(*r.args)[1][-1] for r in sorted(first, key=lambda r: r.idx)]


def _shifting_correction(lm: Any, labels: list[int], path: Path) -> Path:
    """A constant correction that moves the two label logits apart by 3 nats."""
    from lm_eval_robust.scoring.correction import save

    corr = _correction(lm.fingerprint_for(TASK), ids=labels)
    corr.W = None
    corr.method = "constant"
    corr.beta = np.array([1.5, -1.5])
    return save(corr, path)


def test_a_corrected_run_recomputes_on_a_cache_filled_without_the_correction(
    tiny_model_dir: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lm_eval.api.model import CachingLM

    reqs = _requests([TASK], limit=6)
    db = str(tmp_path / "cache" / "lm.db")
    plain = _lm(tiny_model_dir)
    uncorrected = CachingLM(plain, db).loglikelihood(reqs)  # fills the cache
    labels = _labels(plain, reqs)
    corr = _shifting_correction(plain, labels, tmp_path / "corr.safetensors")

    corrected_lm = _lm(tiny_model_dir, correction=str(corr))
    want = _lm(tiny_model_dir, correction=str(corr)).loglikelihood(reqs, disable_tqdm=True)
    seen = _counting(corrected_lm, monkeypatch)
    got = CachingLM(corrected_lm, db).loglikelihood(reqs)
    assert sum(seen) > 0  # recomputed, not read from the uncorrected entries
    assert got == want and got != uncorrected
    # the same setting again reads its own entries: no forward pass
    again_lm = _lm(tiny_model_dir, correction=str(corr))
    seen_again = _counting(again_lm, monkeypatch)
    assert CachingLM(again_lm, db).loglikelihood(reqs) == want and seen_again == []
    # ... and the uncorrected entries are still there for the uncorrected model
    plain_again = _lm(tiny_model_dir)
    seen_plain = _counting(plain_again, monkeypatch)
    assert CachingLM(plain_again, db).loglikelihood(reqs) == uncorrected and seen_plain == []


def test_the_key_moves_with_every_setting(tiny_model_dir: Path, data_dir: Path, tmp_path: Path):
    from lm_eval_robust.scoring.cache_keys import cache_settings, table_name

    base = _lm(tiny_model_dir)
    names = {table_name(cache_settings(base))}
    reqs = _requests([TASK], limit=2)
    corr = _shifting_correction(base, _labels(base, reqs), tmp_path / "c.safetensors")
    for kw in (
        {"correction": str(corr)},
        {"prefix_cache": "false"},
        {"max_length": 64},
        {"dtype": "bfloat16"},
    ):
        args = {"dtype": "float32", **kw}
        from lm_eval_robust.scoring.model import DebiasedHFLM

        lm = DebiasedHFLM(pretrained=str(tiny_model_dir), batch_size=4, device="cpu", **args)
        names.add(table_name(cache_settings(lm)))
    assert len(names) == 5
    # a correction file rewritten in place changes the key too
    lm = _lm(tiny_model_dir, correction=str(corr))
    before = table_name(cache_settings(lm))
    corr.write_bytes(corr.read_bytes() + b" ")
    assert table_name(cache_settings(lm)) != before


def test_prompts_past_max_length_are_refused(tiny_model_dir: Path, data_dir: Path) -> None:
    from lm_eval_robust.scoring.model import TruncationError

    reqs = _requests([TASK], limit=3)
    lm = _lm(tiny_model_dir, max_length=16)
    with pytest.raises(TruncationError) as info:
        lm.loglikelihood(reqs, disable_tqdm=True)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("requests longer than max_length=16 tokens would be scored cut short")
    assert f"{TASK}: {len(reqs)} of {len(reqs)}, longest" in msg and "raise max_length" in msg
    # at the model's own window nothing is cut, and the scores come back
    assert len(_lm(tiny_model_dir).loglikelihood(reqs, disable_tqdm=True)) == len(reqs)


def test_generation_contexts_past_the_window_are_refused(tiny_model_dir: Path) -> None:
    from lm_eval.api.instance import Instance

    from lm_eval_robust.scoring.model import TruncationError

    def req(context: str, doc_id: int) -> Any:
        gen = {"max_gen_toks": 8, "until": ["\n"], "do_sample": False}
        return Instance(
            request_type="generate_until",
            doc={"example_id": f"e{doc_id}", "pert_id": 0},
            arguments=(context, gen),
            idx=0,
            metadata=("nq_open_text_pert", doc_id, 1),
        )

    lm = _lm(tiny_model_dir, max_length=24)
    long = req("who wrote the book " * 20, 0)
    with pytest.raises(TruncationError) as info:
        lm.generate_until([long, req("who", 1)], disable_tqdm=True)
    msg = str(info.value)
    assert msg.startswith("requests longer than max_length - max_gen_toks=16 tokens")
    assert "nq_open_text_pert: 1 of 2, longest" in msg
    assert len(lm.generate_until([req("who", 1)], disable_tqdm=True)) == 1


def test_prompts_of_other_tasks_past_max_length_are_counted_per_task(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A task of lm-eval's own is scored on its last max_length tokens, as --model hf scores it,
    and a warning counts the cut requests per task; a wrapped variant's are refused."""
    from lm_eval.api.instance import Instance

    from lm_eval_robust.scoring.model import TruncationError

    def req(context: str, doc: dict[str, Any], task: str, doc_id: int) -> Any:
        return Instance(
            request_type="loglikelihood",
            doc=doc,
            arguments=(context, " yes"),
            idx=0,
            metadata=(task, doc_id, 1),
        )

    lm = _lm(tiny_model_dir, max_length=16)
    long, short = "is the sky blue today " * 10, "sky?"
    reqs = [req(long, {"q": 1}, "stock_task", 0), req(short, {"q": 2}, "stock_task", 1)]
    with caplog.at_level("WARNING"):
        out = lm.loglikelihood(reqs, disable_tqdm=True)
    assert len(out) == 2 and all(np.isfinite(ll) for ll, _ in out)
    warned = [r.getMessage() for r in caplog.records if "scored on their last" in r.getMessage()]
    assert len(warned) == 1
    assert "max_length=16" in warned[0] and "stock_task: 1, longest" in warned[0]
    # at the model's own window nothing is cut and nothing is said
    caplog.clear()
    with caplog.at_level("WARNING"):
        _lm(tiny_model_dir).loglikelihood(reqs, disable_tqdm=True)
    assert not [r for r in caplog.records if "scored on their last" in r.getMessage()]
    # a perturbed variant of a stock task (wrap) is refused like our own tasks
    wrapped = [req(long, {"q": 1, "_lmer": {"example": 0, "pert_id": 1}}, "x_robust_text", 0)]
    with pytest.raises(TruncationError, match=r"x_robust_text: 1 of 1"):
        lm.loglikelihood(wrapped, disable_tqdm=True)
