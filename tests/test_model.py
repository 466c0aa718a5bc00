"""debiased_hf gives the log-likelihoods of the harness's hf model, through the fast path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from lm_eval_robust.base.errors import UserError

pytest.importorskip("lm_eval")  # a hard dependency; importorskip only makes the failure readable


def _requests(task_names: list[str], limit: int) -> list:
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    tm = TaskManager(
        include_path=lm_eval_robust.task_dir(),
        include_defaults=False,
        metadata={"n_perturbations": 2, "n_examples": 20},
    )
    loaded = tm.load(task_names)["tasks"]
    reqs = []
    for _name, task in sorted(loaded.items()):
        task.build_all_requests(limit=limit, rank=0, world_size=1)
        reqs += [inst for inst in task.instances]
    return reqs


@pytest.fixture(scope="module")
def requests(data_dir: Path) -> list:
    import os

    os.environ.setdefault("LM_EVAL_ROBUST_DATA_DIR", str(data_dir))
    from lm_eval.tasks import TaskManager  # noqa: F401

    return _requests(["ni065_format_pert", "ni280_text_pert", "ni158_format_pert"], limit=12)


def _models(model_dir: Path):
    from lm_eval.models.huggingface import HFLM

    from lm_eval_robust.scoring.model import DebiasedHFLM

    kw = dict(pretrained=str(model_dir), batch_size=4, dtype="float32", device="cpu")
    return HFLM(**kw), DebiasedHFLM(**kw)


@pytest.mark.slow
def test_parity_with_hf(tiny_model_dir: Path, requests: list) -> None:
    hf, ours = _models(tiny_model_dir)
    ref = hf.loglikelihood(requests, disable_tqdm=True)
    got = ours.loglikelihood(requests, disable_tqdm=True)
    assert len(ref) == len(got) == len(requests)
    for (a, ga), (b, gb) in zip(ref, got, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
        assert ga == gb


@pytest.mark.slow
def test_fast_path_used_for_labels(tiny_model_dir: Path, requests: list, monkeypatch) -> None:
    from lm_eval.models.huggingface import HFLM

    _, ours = _models(tiny_model_dir)

    def boom(*args, **kwargs):  # the parent's full-logits path must not be needed
        raise AssertionError("slow path used")

    monkeypatch.setattr(HFLM, "_loglikelihood_tokens", boom)
    got = ours.loglikelihood(requests, disable_tqdm=True)
    assert all(isinstance(v, float) for v, _ in got)


def _answers(ours: Any, context: str, answers: list[str]) -> list[Any]:
    from lm_eval.api.instance import Instance

    return [Instance("loglikelihood", {}, (context, a), i) for i, a in enumerate(answers)]


def test_multi_token_answers_take_the_last_positions_path(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A multiple-choice task's answers of 5 to ``max_scored_tokens`` tokens are scored at their
    own positions, sharing one forward of the question through the prefix cache, with the
    harness's log-likelihoods and greedy flags."""
    from lm_eval.models.huggingface import HFLM

    hf, ours = _models(tiny_model_dir)
    context = "Question: " + "which of these dates comes first in the calendar year " * 4
    answers = [
        " the brown cat sits on the bed",
        " 05/01/2021 is the day before the party",
        " on atop of the bed peering forward twice",
        " A",
    ]
    reqs = _answers(ours, context, answers)
    lengths = [len(ours.tok_encode(a)) for a in answers]
    assert max(lengths) > ours.max_fast_tokens and max(lengths) <= ours.max_scored_tokens
    ref = hf.loglikelihood(reqs, disable_tqdm=True)

    def boom(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the harness's full-logits path was used")

    monkeypatch.setattr(HFLM, "_loglikelihood_tokens", boom)
    got = ours.loglikelihood(reqs, disable_tqdm=True)
    for (a, ga), (b, gb) in zip(ref, got, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
        assert ga == gb
    assert ours._prefix_cache is not None
    assert ours._prefix_cache.stats.n_cached_rows >= 3  # the answers shared the question's cache


def test_long_continuations_fall_back(tiny_model_dir: Path) -> None:
    hf, ours = _models(tiny_model_dir)
    long = " the brown cat sits perched on atop of the bed peering forward" * 4
    assert len(ours.tok_encode(long)) > ours.max_scored_tokens
    reqs = _answers(ours, "Sentence: hello there", [long, " A"])
    ref = hf.loglikelihood(reqs, disable_tqdm=True)
    got = ours.loglikelihood(reqs, disable_tqdm=True)
    for (a, _), (b, _) in zip(ref, got, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def test_last_positions_head_matches_full_logits(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    from lm_eval_robust.scoring.model import last_positions_head

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    inps = torch.randint(3, 100, (3, 9))
    with torch.no_grad():
        full = model(inps).logits
        pos = torch.tensor([[7, 8], [3, 4], [0, 1]])
        with last_positions_head(model, pos) as cap:
            part = model(inps).logits
    assert part.shape == (3, 2, full.shape[-1])
    assert cap["hidden"].shape == (3, 2, model.config.hidden_size)
    for b in range(3):
        torch.testing.assert_close(part[b], full[b, pos[b]], atol=1e-5, rtol=1e-5)
    # the hook is gone after the context
    with torch.no_grad():
        assert model(inps).logits.shape == full.shape


def test_label_token_check() -> None:
    from lm_eval_robust.scoring.model import LabelTokenError, check_label_tokens

    check_label_tokens("t", {" A": [5], " B": [6]})
    check_label_tokens("t", {" 1": [9, 5], " 2": [9, 6]})  # shared leading piece is fine
    with pytest.raises(LabelTokenError, match="Non-threat"):
        check_label_tokens("t", {" Threat": [7], " Non-threat": [8, 9, 10]})
    with pytest.raises(LabelTokenError, match="single token"):
        check_label_tokens("t", {" A": [5], " B": [5]})


def test_prefix_cache_auto_is_on_in_every_dtype(tiny_model_dir: Path) -> None:
    from lm_eval_robust.scoring.model import DebiasedHFLM

    kw = dict(pretrained=str(tiny_model_dir), batch_size=2, device="cpu")
    assert DebiasedHFLM(dtype="float32", **kw)._prefix_cache is not None
    # on in half precision too: within the envelope of hf's own batch-size moves (benchmarks.md)
    assert DebiasedHFLM(dtype="bfloat16", **kw)._prefix_cache is not None
    assert DebiasedHFLM(dtype="bfloat16", prefix_cache="false", **kw)._prefix_cache is None
    assert DebiasedHFLM(dtype="float32", prefix_cache=False, **kw)._prefix_cache is None


@pytest.mark.parametrize(
    ("batch_size", "fast", "expected"),
    [(1, None, 16), ("auto", None, 16), (8, None, 8), (1, 1, 1), (8, 32, 32), (1, "auto", 16)],
)
def test_fast_batch_size_rule(
    tiny_model_dir: Path, batch_size: object, fast: object, expected: int
) -> None:
    """The harness's default batch size 1 reads as "not given": the device default applies."""
    from lm_eval_robust.scoring.model import DebiasedHFLM

    lm = DebiasedHFLM(
        pretrained=str(tiny_model_dir),
        batch_size=batch_size,
        fast_batch_size=fast,
        dtype="float32",
        device="cpu",
    )
    assert lm._fast_batch_size() == expected


@pytest.mark.parametrize("bad", ["0", "-2", "lots", "1.5"])
def test_fast_batch_size_bad_values_are_one_line(tiny_model_dir: Path, bad: str) -> None:
    from lm_eval_robust.base.errors import UserError
    from lm_eval_robust.scoring.model import DebiasedHFLM

    with pytest.raises(UserError, match=r"fast_batch_size=.*positive whole number"):
        DebiasedHFLM(pretrained=str(tiny_model_dir), fast_batch_size=bad, device="cpu")


def test_progress_bar_counts_prompts(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two prompts of one doc each, two labels each: the bar's total is 2 prompts, not 4."""
    import lm_eval_robust.scoring.model as model_mod
    from lm_eval_robust.scoring.model import DebiasedHFLM

    seen: dict[str, object] = {}

    class Bar:
        def __init__(self, **kw: object) -> None:
            seen.update(kw)
            seen["n"] = 0

        def update(self, n: int) -> None:
            seen["n"] = int(seen["n"]) + n  # type: ignore[call-overload]

        def close(self) -> None:
            pass

    monkeypatch.setattr(model_mod, "tqdm", Bar)
    lm = DebiasedHFLM(pretrained=str(tiny_model_dir), dtype="float32", device="cpu")
    rows = [
        model_mod._Row(
            inp=(1, 2, 3), key=None, requests=[(0, [5]), (1, [6])], docs={("t", 0): {0: 5, 1: 6}}
        ),
        model_mod._Row(
            inp=(1, 2, 4), key=None, requests=[(2, [5]), (3, [6])], docs={("t", 1): {0: 5, 1: 6}}
        ),
    ]
    out = list(lm._last_positions_loglikelihood(rows, disable_tqdm=False))
    assert len(out) == 4
    assert seen["total"] == 2 and seen["n"] == 2 and seen["unit"] == "prompt"
    assert "2 distinct model inputs" in str(seen["desc"])


def test_unknown_model_refused_before_any_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from lm_eval.models.huggingface import HFLM

    from lm_eval_robust.scoring.model import DebiasedHFLM

    def no_load(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(HFLM, "__init__", no_load)
    with pytest.raises(UserError, match="did you mean gemma-3-270m"):
        DebiasedHFLM(pretrained="gemma-3-207m")


def test_missing_data_dir_refused_before_the_model_loads(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lm_eval.models.huggingface import HFLM

    from lm_eval_robust.scoring.model import DebiasedHFLM

    def no_load(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(HFLM, "__init__", no_load)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LM_EVAL_ROBUST_DATA_DIR", "../shared/data-missing")
    with pytest.raises(UserError) as err:
        DebiasedHFLM(pretrained=str(tiny_model_dir))
    msg = str(err.value)
    assert "from LM_EVAL_ROBUST_DATA_DIR does not exist" in msg
    assert f"tried {(tmp_path / '../shared/data-missing').resolve()} from {tmp_path}" in msg


def _half_copy(src: Path, dst: Path) -> Path:
    import json
    import shutil

    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["dtype"] = "bfloat16"
    config.pop("torch_dtype", None)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_cpu_dtype_default(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lm_eval_robust.scoring import cpu_dtype

    half = str(_half_copy(tiny_model_dir, tmp_path / "half"))
    monkeypatch.setattr(cpu_dtype, "cpu_has_native_bf16", lambda: False)
    assert cpu_dtype.cpu_dtype_default(half, {"device": "cpu"}) == "float32"
    assert cpu_dtype.cpu_dtype_default(half, {"device": "cpu", "dtype": "auto"}) == "float32"
    assert cpu_dtype.cpu_dtype_default(half, {"device": "cpu", "dtype": "bfloat16"}) is None
    full = str(tiny_model_dir)
    if cpu_dtype.checkpoint_dtype(full) not in ("bfloat16", "float16"):
        assert cpu_dtype.cpu_dtype_default(full, {"device": "cpu"}) is None
    monkeypatch.setattr(cpu_dtype, "cpu_has_native_bf16", lambda: True)
    assert cpu_dtype.cpu_dtype_default(half, {"device": "cpu"}) is None


def test_half_checkpoint_runs_in_float32_on_a_cpu_without_bf16(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from lm_eval_robust.scoring import cpu_dtype, model

    half = str(_half_copy(tiny_model_dir, tmp_path / "half"))
    monkeypatch.setattr(cpu_dtype, "cpu_has_native_bf16", lambda: False)
    lm = model.DebiasedHFLM(pretrained=half, device="cpu")
    assert lm.model.dtype == torch.float32
    info = lm.get_model_info()
    assert info["model_dtype"] == "torch.float32"  # as hf writes it
    assert "dtype=auto on a CPU without native half precision" in info["model_dtype_note"]
    kept = model.DebiasedHFLM(pretrained=half, device="cpu", dtype="bfloat16")
    assert kept.model.dtype == torch.bfloat16
    assert "model_dtype_note" not in kept.get_model_info()
