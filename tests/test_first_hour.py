"""What a new user meets first: one line before any model loads, the real shot count, why a
certificate is n/a, no repeated harness notes, and a cache call that does not warn."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from lm_eval_robust.errors import UserError
from lm_eval_robust.offline_models import check_pretrained_name, load_failure_message


def test_misspelt_alias_names_the_alias(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        check_pretrained_name("gemma-3-207m")
    msg = str(err.value)
    assert "did you mean gemma-3-270m?" in msg
    assert "aliases: gemma-3-270m, qwen2.5-coder-1.5b-instruct" in msg
    assert "\n" not in msg


def test_missing_folder_shows_the_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        check_pretrained_name("./models/nothing-here")
    assert str(tmp_path / "models" / "nothing-here") in str(err.value)


def test_uncached_hub_id_offline_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as err:
        check_pretrained_name("some-org/some-model-not-cached")
    assert "the hub is offline (HF_HUB_OFFLINE=1)" in str(err.value)


def test_existing_folder_and_aliases_pass(tiny_model_dir: Path) -> None:
    check_pretrained_name(str(tiny_model_dir))
    check_pretrained_name("gemma-3-270m")


def test_load_failure_message_is_one_line() -> None:
    exc = OSError("We couldn't connect to 'https://huggingface.co'.\nCheck your connection.")
    msg = load_failure_message("x/y", exc)
    assert "\n" not in msg
    assert msg.startswith("cannot load pretrained=x/y: We couldn't connect")


def test_unknown_model_refused_before_any_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from lm_eval.models.huggingface import HFLM

    from lm_eval_robust.model import DebiasedHFLM

    def no_load(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(HFLM, "__init__", no_load)
    with pytest.raises(UserError, match="did you mean gemma-3-270m"):
        DebiasedHFLM(pretrained="gemma-3-207m")


def test_missing_data_dir_refused_before_the_model_loads(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lm_eval.models.huggingface import HFLM

    from lm_eval_robust.model import DebiasedHFLM

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


def test_data_dir_from_metadata_names_its_source(tmp_path: Path) -> None:
    from lm_eval_robust.tasks.data import resolve_data_dir

    with pytest.raises(UserError, match="from --metadata data_dir does not exist"):
        resolve_data_dir(str(tmp_path / "absent"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is not a folder"):
        resolve_data_dir(str(tmp_path / "file"))


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("lm_eval.api.task", logging.WARNING, "", 0, message, None, None)


def test_custom_kwargs_note_dropped_for_our_tasks_only() -> None:
    from lm_eval_robust._plugin import task_dir
    from lm_eval_robust.harness_logs import CUSTOM_KWARGS, DropCustomKwargsNote, task_names

    f = DropCustomKwargsNote(task_names(task_dir()))
    assert not f.filter(_record(f"ni065_format_pert: {CUSTOM_KWARGS} in console"))
    assert f.filter(_record(f"some_builtin_task: {CUSTOM_KWARGS} in console"))
    assert f.filter(_record("ni065_format_pert: another warning"))


def test_certificate_na_is_explained_once(caplog: pytest.LogCaptureFixture) -> None:
    from lm_eval_robust.metrics import certify

    items = []
    for ex in range(4):
        for pert in range(3):  # K = 2: one estimation shift each, no box
            items.append(
                {
                    "task": "ni999_format_pert",
                    "example_id": f"e{ex}",
                    "pert_id": pert,
                    "gold": ex % 2,
                    "pred": ex % 2,
                    "tied": False,
                    "margin": 1.0,
                    "ll": [0.0, -1.0 - pert] if ex % 2 == 0 else [-1.0 - pert, 0.0],
                }
            )
    certify._explained.clear()
    with caplog.at_level(logging.WARNING, logger="lm_eval_robust.metrics.certify"):
        for fn in (certify.p_cert_h, certify.p_cert_c, certify.pop_cert_h, certify.pop_cert_c):
            assert fn(items) != fn(items)  # NaN
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("ni999_format_pert: p_cert_h, p_cert_c, pop_cert_h, pop_cert_c")
    assert "not computable" in lines[0] or "need at least" in lines[0]


@pytest.mark.slow
def test_harness_reports_the_shots_in_the_prompt(data_dir: Path) -> None:
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    tm = TaskManager(
        include_path=lm_eval_robust.task_dir(),
        metadata={"n_examples": 20, "n_perturbations": 1, "n_shots": 1, "data_dir": str(data_dir)},
    )
    task = tm.load(["ni065_format_pert"])["tasks"]["ni065_format_pert"]
    assert task.get_config("num_fewshot") == 0  # the harness adds no demonstrations
    # the table's n-shot column: the shots the docs were built with (0.4.11 keeps the YAML's
    # metadata in the task config and builds the docs from it; later releases merge ours)
    shots = int(task.config.metadata["n_shots"])
    assert shots in (1, 2)
    assert task.dump_config()["num_fewshot"] == shots
    prompt = task.doc_to_text(task.eval_docs[0])
    assert isinstance(prompt, str) and prompt


def test_cache_argument_follows_the_forward_signature() -> None:
    import torch

    from lm_eval_robust.prefix_cache import cache_argument, output_cache

    class New(torch.nn.Module):
        def forward(self, input_ids: Any = None, cache: Any = None) -> None: ...

    class Old(torch.nn.Module):
        def forward(self, input_ids: Any = None, past_key_values: Any = None) -> None: ...

    assert cache_argument(New()) == "cache"
    assert cache_argument(Old()) == "past_key_values"

    class OutNew:
        cache = "c"

    class OutOld:
        past_key_values = "p"

    assert output_cache(OutNew()) == "c"
    assert output_cache(OutOld()) == "p"


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
    from lm_eval_robust import cpu_dtype

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

    from lm_eval_robust import cpu_dtype, model

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
