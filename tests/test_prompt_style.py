"""Prompt style: plain prompts, or the model's chat template (``--apply_chat_template``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from lm_eval_robust.scoring.correction import CorrectionError
from lm_eval_robust.scoring.model import PromptStyleError

CHAT = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)
MD = {"n_examples": 8, "n_perturbations": 1}
TASK = "ni1284_format_pert_train"  # labels "0" / "1": one token with and without a space


@pytest.fixture(scope="module")
def chat_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("tiny-chat")
    shutil.copytree(tiny_model_dir, out, dirs_exist_ok=True)
    tok = AutoTokenizer.from_pretrained(out)
    tok.chat_template = CHAT
    tok.save_pretrained(out)
    return out


def _evaluate(model_dir: Path, data_dir: Path, chat: bool, md: dict[str, Any], **extra: Any) -> Any:
    import lm_eval
    from lm_eval.tasks import TaskManager

    from lm_eval_robust.harness._plugin import register, task_dir

    register()
    tm = TaskManager(include_path=task_dir(), include_defaults=False, metadata={**MD, **md})
    return lm_eval.simple_evaluate(
        model="debiased_hf",
        model_args={"pretrained": str(model_dir), "device": "cpu", **extra},
        tasks=[TASK],
        task_manager=tm,
        batch_size=4,
        apply_chat_template=chat,
        log_samples=True,
    )


def test_plain_style_scores_label_after_a_space(tiny_model_dir: Path, data_dir: Path) -> None:
    out = _evaluate(tiny_model_dir, data_dir, chat=False, md={})
    sample = out["samples"][TASK][0]
    context, continuation = sample["arguments"][0][0], sample["arguments"][0][1]
    assert context == sample["doc"]["prompt"]
    assert continuation == " " + sample["doc"]["choices"][0]


def test_chat_style_scores_first_token_of_the_answer(
    chat_model_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    from lm_eval_robust.values.features import load_features

    out = _evaluate(
        chat_model_dir, data_dir, chat=True, md={}, collect_features=str(tmp_path / "f")
    )
    sample = out["samples"][TASK][0]
    context, continuation = sample["arguments"][0][0], sample["arguments"][0][1]
    assert context.endswith("<s>assistant\n") and sample["doc"]["prompt"] in context
    assert continuation == sample["doc"]["choices"][0]  # no leading space
    assert load_features(tmp_path / "f" / TASK).prompt_style == "chat"


def test_pinned_style_refuses_the_other(
    tiny_model_dir: Path, chat_model_dir: Path, data_dir: Path
) -> None:
    with pytest.raises(PromptStyleError, match="add --apply_chat_template"):
        _evaluate(tiny_model_dir, data_dir, chat=False, md={"prompt_style": "chat"})
    with pytest.raises(PromptStyleError, match="drop --apply_chat_template"):
        _evaluate(chat_model_dir, data_dir, chat=True, md={"prompt_style": "plain"})


def test_model_without_template_gives_one_line_error(tiny_model_dir: Path, data_dir: Path) -> None:
    with pytest.raises(PromptStyleError, match="has no chat template"):
        _evaluate(tiny_model_dir, data_dir, chat=True, md={})


def test_correction_fitted_on_plain_prompts_is_refused_on_chat(
    chat_model_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    from lm_eval_robust.scoring.correction import save
    from lm_eval_robust.stats.fit.run import FitSettings, fit_features
    from lm_eval_robust.values.features import load_features

    _evaluate(chat_model_dir, data_dir, chat=False, md={}, collect_features=str(tmp_path / "f"))
    feats = load_features(tmp_path / "f" / TASK)
    assert feats.prompt_style == "plain"
    corr = fit_features(feats, FitSettings(method="batch_calibration"))
    assert corr.stats["prompt_style"] == "plain"
    save(corr, tmp_path / "c" / "ni1284_format_pert.safetensors")
    with pytest.raises(CorrectionError, match="fitted on plain-style prompts"):
        _evaluate(chat_model_dir, data_dir, chat=True, md={}, correction=str(tmp_path / "c"))


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
