"""Bad inputs (issue 7): each one stops with ONE line that names the problem and the fix.

Every case asserts a :class:`~lm_eval_robust.base.errors.UserError` subclass whose message has no
newline and matches a pattern for the problem and one for the fix, or, for the command line, exit
status 2 and exactly one ``lm-eval-robust: error: ...`` line on stderr (the report subcommand
prints ``lm-eval-robust report: error: ...``). Never a traceback from deep inside, never a silently
wrong number.

Fast on purpose (no real model, no full task): the tiny random model of ``conftest.py``, a few
docs per task, synthetic feature shards and synthetic lm-eval output folders.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import pickle
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli import main as cli_main
from lm_eval_robust.scoring.correction import (
    Correction,
    check_fingerprint,
    load,
    load_corrections,
    save,
)

TASK = "ni322_format_pert"  # binary task: " Threat" / " Non"
SMALL = {"n_examples": 10, "n_perturbations": 1}
FAKE_FP = {
    "architecture": "LlamaForCausalLM",
    "model_type": "llama",
    "name_or_path": "fake/model",
    "hidden_size": 8,
    "vocab_size": 50,
    "head_sha256": "0123456789abcdef",
    "head_bias_sha256": None,
    "tokenizer_sha256": "fedcba9876543210",
    "tokenizer_vocab_size": 50,
}


# ---------------------------------------------------------------------------------------------
# helpers


@contextlib.contextmanager
def one_line_error(*patterns: str, cls: type[Exception] = UserError) -> Iterator[Any]:
    """Expect ``cls`` (a UserError) with a non-empty one-line message matching every pattern."""
    with pytest.raises(cls) as info:
        yield info
    msg = str(info.value)
    assert isinstance(info.value, UserError), type(info.value)
    assert msg and "\n" not in msg and msg == msg.strip(), repr(msg)
    for pat in patterns:
        assert re.search(pat, msg), f"{pat!r} not in {msg!r}"


def cli_error(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    *patterns: str,
    prefix: str = "lm-eval-robust: error: ",
) -> str:
    """Run the CLI: exit status 2 and exactly one ``prefix...`` line on stderr; returns it."""
    capsys.readouterr()
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert err.endswith("\n") and err.count("\n") == 1, repr(err)
    line = err.rstrip("\n")
    assert line.startswith(prefix), repr(line)
    for pat in patterns:
        assert re.search(pat, line), f"{pat!r} not in {line!r}"
    return line


def _lm(model_dir: Path, **kw: Any) -> Any:
    from lm_eval_robust.scoring.model import DebiasedHFLM

    return DebiasedHFLM(
        pretrained=str(model_dir), batch_size=8, dtype="float32", device="cpu", **kw
    )


def _correction(fp: dict[str, Any], *, task: str = TASK, ids: list[int] | None = None, d: int = 2):
    n = int(fp["hidden_size"])
    return Correction(
        method="ridge",
        W=np.zeros((n + 1, d)),
        beta=np.zeros(d),
        label_token_ids=ids if ids is not None else list(range(1, d + 1)),
        labels=[f"L{k}" for k in range(d)],
        task=task,
        fingerprint=dict(fp),
    )


def _requests(task: str, n_docs: int = 2) -> list[Any]:
    """Loglikelihood requests of the first docs of one of our tasks, as the harness builds them."""
    from lm_eval.api.instance import Instance

    from lm_eval_robust.tasks.ni import NIConfig, build_docs

    short = task.split("_")[0]
    docs = build_docs(short, "format", "test", NIConfig.from_metadata(SMALL))[:n_docs]
    return [
        Instance(
            request_type="loglikelihood",
            doc=doc,
            arguments=(doc["prompt"], " " + choice),  # the YAML's target_delimiter
            idx=j,
            metadata=(task, i, 1),
        )
        for i, doc in enumerate(docs)
        for j, choice in enumerate(doc["choices"])
    ]


def _write_shard(
    folder: Path, *, task: str = f"{TASK}_train", bad: float | None = None, n: int = 8
) -> Path:
    """A feature shard laid out as ``FeatureCollector.write`` writes it: 6 examples x (1 + 3)."""
    rng = np.random.default_rng(0)
    ex = [f"e{i}" for i in range(6) for _ in range(4)]
    pert = [p for _ in range(6) for p in range(4)]
    x = rng.normal(size=(24, n)).astype(np.float32)
    logits = rng.normal(size=(24, 2)).astype(np.float32)
    if bad is not None:
        x[5, 3] = bad
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {
        "head_rows": rng.normal(size=(2, n)).astype(np.float32),
        "x": x,
        "label_logits": logits,
        "label_token_ids": np.tile(np.array([[7, 9]], dtype=np.int64), (24, 1)),
        "pert_id": np.array(pert, dtype=np.int64),
        "gold": np.array([i % 2 for i in range(6) for _ in range(4)], dtype=np.int64),
    }
    header = {
        "task": task,
        "example_id": ex,
        "pert_kind": ["format"] * 24,
        "format_id": ["f"] * 24,
        "fingerprint": FAKE_FP,
        "label_score_dtype": "float32",
    }
    save_file(
        tensors, str(folder / "rank0.safetensors"), metadata={"lm_eval_robust": json.dumps(header)}
    )
    return folder


STAMP = "2025-01-01T00-00-00.000001"


def _write_run(
    root: Path,
    task: str = "ni065_format_pert",
    *,
    n_perturbations: int = 3,
    samples: bool = True,
) -> Path:
    """A synthetic ``lm_eval --output_path ROOT --log_samples`` folder of one task."""
    folder = root / "tiny"
    folder.mkdir(parents=True)
    config = {
        "task": task,
        "dataset_kwargs": {"lmer_task": task.split("_")[0], "lmer_kind": "format"},
        "metadata": {"n_examples": 40, "n_perturbations": n_perturbations, "seed": 1234},
    }
    results = {
        "results": {task: {"alias": task}},
        "configs": {task: config},
        "config": {"model": "debiased_hf", "model_args": "pretrained=tiny"},
    }
    (folder / f"results_{STAMP}.json").write_text(json.dumps(results))
    if samples:
        lines = []
        for e in range(8):
            gold = e % 2
            for pid in range(n_perturbations + 1):
                margin = 1.0 if (e + pid) % 3 else -0.5
                ll = [0.0, 0.0]
                ll[1 - gold] = -margin
                item = {
                    "task": task.split("_")[0],
                    "example_id": f"e{e}",
                    "pert_id": pid,
                    "gold": gold,
                    "pred": int(np.argmax(ll)),
                    "margin": margin,
                    "ll": ll,
                }
                doc = {"kind": "format", "split": "test", "example_id": f"e{e}", "pert_id": pid}
                digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
                lines.append(
                    {
                        "doc_id": 0,
                        "doc": doc,
                        "doc_hash": digest,
                        "bac_clean": item,
                        "bac_pert": item,
                    }
                )
        text = "".join(json.dumps(s) + "\n" for s in lines)
        (folder / f"samples_{task}_{STAMP}.jsonl").write_text(text)
    return root


REPORT_FAST = ["--resamples", "100", "--no-plots", "--quiet"]


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def lm(tiny_model_dir: Path, data_dir: Path) -> Any:
    return _lm(tiny_model_dir)


@pytest.fixture(scope="module")
def fp(lm: Any) -> dict[str, Any]:
    return dict(lm.fingerprint)


@pytest.fixture(scope="module")
def corr_file(fp: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid correction for the tiny model and ``ni322_format_pert``."""
    return save(_correction(fp), tmp_path_factory.mktemp("corr") / "ni322.safetensors")


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    """An existing regular file: a path under it cannot be created, even by root."""
    f = tmp_path / "a_file"
    f.write_text("not a folder")
    return f


# ---------------------------------------------------------------------------------------------
# corrections: another model, tokenizer, task or label set


def test_correction_for_another_model(tiny_model_dir: Path, corr_file: Path, tmp_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    other = tmp_path / "other-model"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.01)
    model.save_pretrained(other)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(other)
    with one_line_error(r"fitted for model .*head_sha256", r"re-run `lm-eval-robust fit`"):
        _lm(other, correction=str(corr_file))


def test_correction_for_another_tokenizer(tiny_model_dir: Path, corr_file: Path, tmp_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    other = tmp_path / "other-tokenizer"
    AutoModelForCausalLM.from_pretrained(tiny_model_dir).save_pretrained(other)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.add_tokens(["zzqq"])
    tok.save_pretrained(other)
    with one_line_error(r"tokenizer_sha256", r"re-run `lm-eval-robust fit`") as info:
        _lm(other, correction=str(corr_file))
    assert "head_sha256" not in str(info.value)  # the head is the same: only the tokenizer differs


def test_correction_with_another_tasks_labels(fp: dict[str, Any]):
    corr = _correction(fp, ids=[4, 9])
    with one_line_error(
        r"label token ids \[4, 9\].*differ.* \[9, 4\]", r"re-run `lm-eval-robust fit`"
    ):
        check_fingerprint(corr, fp, label_token_ids=[9, 4])


def test_correction_with_another_tasks_labels_in_a_run(
    lm: Any, fp: dict[str, Any], tiny_model_dir: Path, tmp_path: Path
):
    # labels " 0" / " 1" of ni1284, saved under ni322's name: the prompts score other tokens
    ids = [lm.tok_encode(" 0")[-1], lm.tok_encode(" 1")[-1]]
    path = save(_correction(fp, ids=ids), tmp_path / "c.safetensors")
    debiased = _lm(tiny_model_dir, correction=str(path))
    with one_line_error(rf"scores label tokens \[{ids[0]}, {ids[1]}\]", r"fit it for this task"):
        debiased.loglikelihood(_requests(TASK), disable_tqdm=True)


def test_correction_with_another_number_of_labels_in_a_run(
    fp: dict[str, Any], tiny_model_dir: Path, tmp_path: Path
):
    path = save(_correction(fp, d=4), tmp_path / "c.safetensors")
    debiased = _lm(tiny_model_dir, correction=str(path))
    with one_line_error(r"has 4 labels .* prompts have 2", r"fit the correction for this task"):
        debiased.loglikelihood(_requests(TASK), disable_tqdm=True)


def test_correction_for_another_task_name(fp: dict[str, Any]):
    corr = _correction(fp, task="ni065_format_pert")
    with one_line_error(
        r"fitted for task 'ni065_format_pert' but is applied to task 'ni322", r"fit"
    ):
        check_fingerprint(corr, fp, task=TASK)


def test_correction_for_another_task_in_a_run(tiny_model_dir: Path, corr_file: Path):
    debiased = _lm(tiny_model_dir, correction=str(corr_file))
    with one_line_error(
        r"no correction for task 'ni280_format_pert'", r"lm-eval-robust fit --task"
    ):
        debiased.loglikelihood(_requests("ni280_format_pert"), disable_tqdm=True)


# ---------------------------------------------------------------------------------------------
# corrections: files that are not corrections


def test_truncated_correction(corr_file: Path, tmp_path: Path):
    p = tmp_path / "trunc.safetensors"
    p.write_bytes(corr_file.read_bytes()[:-40])
    with one_line_error(
        r"not a valid safetensors file \(truncated or corrupt", r"lm-eval-robust fit"
    ):
        load(p)


def test_random_bytes_as_correction(tiny_model_dir: Path, tmp_path: Path):
    p = tmp_path / "random.safetensors"
    p.write_bytes(np.random.default_rng(7).bytes(500))
    with one_line_error(r"not a valid safetensors file", r"lm-eval-robust fit"):
        _lm(tiny_model_dir, correction=str(p))


def test_pickle_as_correction(fp: dict[str, Any], tmp_path: Path):
    p = tmp_path / "c.safetensors"
    with open(p, "wb") as fh:
        pickle.dump({"W": np.zeros((3, 2))}, fh)
    with one_line_error(r"is a pickle file", r"safetensors files written by `lm-eval-robust fit`"):
        load_corrections(p, fp)


def test_torch_save_as_correction(fp: dict[str, Any], tmp_path: Path):
    p = tmp_path / "c.safetensors"
    torch.save({"W": torch.zeros(3, 2)}, p)
    with one_line_error(r"is a pickle file", r"safetensors files written by `lm-eval-robust fit`"):
        load_corrections(p, fp)


def test_directory_without_corrections(tiny_model_dir: Path, tmp_path: Path):
    (tmp_path / "notes.txt").write_text("no corrections here")
    with one_line_error(r"no \*\.safetensors correction files in", r"lm-eval-robust fit"):
        _lm(tiny_model_dir, correction=str(tmp_path))


def test_two_corrections_for_one_task(fp: dict[str, Any], tmp_path: Path):
    save(_correction(fp), tmp_path / "a.safetensors")
    save(_correction(fp), tmp_path / "b.safetensors")
    with one_line_error(rf"two corrections for task '{TASK}'", r"keep one per task"):
        load_corrections(tmp_path, fp)


def test_missing_correction_file(fp: dict[str, Any], tmp_path: Path):
    with one_line_error(r"not found", r"(lm-eval-robust fit|check the path|correction=)"):
        load_corrections(tmp_path / "nope.safetensors", fp)


def test_save_correction_under_a_file(fp: dict[str, Any], a_file: Path):
    with one_line_error(r"cannot write", r"(writable|another path|-o)"):
        save(_correction(fp), a_file / "c.safetensors")


# ---------------------------------------------------------------------------------------------
# features: NaN / inf, singular Gram, jitter


@pytest.mark.parametrize("where", ["x_pert NaN", "f inf"])
def test_non_finite_features_in_gram(where: str):
    from lm_eval_robust.scoring.fit.ridge import GramAccumulator

    rng = np.random.default_rng(0)
    x, f = rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    if where == "x_pert NaN":
        x[1, 2] = np.nan
    else:
        f[0, 0] = np.inf
    acc = GramAccumulator(4, 2)
    name, kind = where.split()
    with one_line_error(rf"{name} contains {kind} in 1 rows", r"re-run collection in float32"):
        acc.add(x, f)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_features_in_shard(tmp_path: Path, bad: float):
    from lm_eval_robust.values.features import load_features

    folder = _write_shard(tmp_path / "feats", bad=bad)
    with one_line_error(r"features contain NaN or inf", r"recollect in float32"):
        load_features(folder)


def test_non_finite_features_while_collecting(tmp_path: Path):
    from lm_eval_robust.scoring.feature_collector import FeatureCollector

    collector = FeatureCollector(str(tmp_path))
    hidden = torch.tensor([1.0, float("nan"), 0.5])
    with one_line_error(r"non-finite hidden state or label logits", r"dtype=float32"):
        collector.add(TASK, 0, hidden, torch.zeros(2), [1, 2])


def test_corrupt_feature_shard(tmp_path: Path):
    from lm_eval_robust.values.features import load_features

    (tmp_path / "rank0.safetensors").write_bytes(b"\x00" * 100)
    with one_line_error(r"not a readable feature file", r"collect again"):
        load_features(tmp_path)


def test_singular_gram_past_jitter_limit():
    from lm_eval_robust.scoring.fit.ridge import fit_ridge

    x = np.random.default_rng(0).normal(size=(20, 4))
    f = np.random.default_rng(1).normal(size=(20, 2))
    # H = ΨᵀΨ − 2 Ψ_cᵀΨ_c with Ψ_c = Ψ: negative definite, no jitter up to the limit helps
    with one_line_error(r"Gram matrix is singular", r"increase lam"):
        fit_ridge(x, f, x, lam=0.0, alpha=-2.0)


def test_jitter_warning_below_limit():
    from lm_eval_robust.scoring.fit.ridge import JitterWarning, fit_ridge

    rng = np.random.default_rng(0)
    half = rng.normal(size=(50, 3))
    x = np.concatenate([half, half], axis=1)  # duplicated columns: singular without jitter
    f = rng.normal(size=(50, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = fit_ridge(x, f, lam=0.0)
    jitter = [w for w in caught if issubclass(w.category, JitterWarning)]
    assert len(jitter) == 1, [str(w.message) for w in caught]
    msg = str(jitter[0].message)
    assert "\n" not in msg and re.search(r"needed jitter .* consider a larger lam", msg), msg
    assert np.isfinite(fit.W).all() and np.isfinite(fit.beta).all()


# ---------------------------------------------------------------------------------------------
# labels


def test_multi_token_labels():
    from lm_eval_robust.scoring.model import LabelTokenError, check_label_tokens

    with one_line_error(r"' Non-threat' -> \[8, 9, 10\]", r"verbalizer", cls=LabelTokenError):
        check_label_tokens(TASK, {" Threat": [7], " Non-threat": [8, 9, 10]})


def test_labels_sharing_their_distinguishing_token():
    from lm_eval_robust.scoring.model import LabelTokenError, check_label_tokens

    with one_line_error(
        r"labels must differ in a single token", r"verbalizer", cls=LabelTokenError
    ):
        check_label_tokens(TASK, {" A": [4, 5], " B": [4, 5]})


# ---------------------------------------------------------------------------------------------
# data


def _docs(task: str = "ni065", kind: str = "format", split: str = "test", **md: Any) -> Any:
    from lm_eval_robust.tasks.ni import NIConfig, build_docs

    return build_docs(task, kind, split, NIConfig.from_metadata({**SMALL, **md}))


def _ni_file(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "task065_timetravel_consistent_sentence_classification.json"
    path.write_text(text, encoding="utf-8")
    return folder


def test_missing_data_directory(tmp_path: Path):
    with one_line_error(r"data directory .* does not exist", r"data_dir=DIR"):
        _docs(data_dir=str(tmp_path / "missing"))


def test_missing_data_file(tmp_path: Path):
    with one_line_error(r"task file task065_\w+\.json not found", r"point data_dir at"):
        _docs(data_dir=str(tmp_path))


def test_corrupt_data_file(tmp_path: Path):
    folder = _ni_file(tmp_path, '{"Definition": ["x"], "Instances": [')
    with one_line_error(r"is not valid JSON", r"replace the file"):
        _docs(data_dir=str(folder))


def test_data_file_that_parses_no_instance(tmp_path: Path):
    instances = [{"id": str(i), "input": "hello", "output": ["zz"]} for i in range(20)]
    folder = _ni_file(tmp_path, json.dumps({"Definition": ["d"], "Instances": instances}))
    with one_line_error(r"only 0 of 20 instances", r"(replace|data_dir|canonical)"):
        _docs(data_dir=str(folder))


def test_data_file_that_is_not_a_task_file(tmp_path: Path):
    folder = _ni_file(tmp_path, "[1, 2, 3]")
    with one_line_error(r"not a Natural Instructions task file", r"(replace|data_dir|canonical)"):
        _docs(data_dir=str(folder))


def test_empty_split(data_dir: Path):
    # 3 examples split 50/35/15 -> 2/1/0: the hold-out split is empty
    assert len(_docs(split="test", n_examples=3)) == 2  # 1 example x (clean + 1)
    with one_line_error(r"split 'holdout' is empty", r"raise n_examples"):
        _docs(split="holdout", n_examples=3)


# ---------------------------------------------------------------------------------------------
# settings


@pytest.mark.parametrize(
    "value",
    [0, -3, "2.5", 2.5, "many", True],
    ids=["zero", "negative", "str-2.5", "float-2.5", "many", "True"],
)
def test_bad_n_perturbations(value: Any):
    from lm_eval_robust.tasks.ni import NIConfig

    with one_line_error(r"n_perturbations must be an integer >= 1, got", r"integer >= 1"):
        NIConfig.from_metadata({"n_perturbations": value})


def test_unknown_perturbation_kind(data_dir: Path):
    with one_line_error(r"unknown perturbation kind 'typos'", r"use one of \['clean'"):
        _docs(kind="typos")


def test_unknown_text_perturbation_kind_in_metadata():
    from lm_eval_robust.tasks.ni import NIConfig

    with one_line_error(r"unknown text perturbation kind\(s\) \['emoji'\]", r"known: \["):
        NIConfig.from_metadata({"text_kinds": "typo,emoji"})


def test_unknown_text_perturbation_kind_in_config():
    from lm_eval_robust.tasks.perturb.text import TextPerturbConfig

    with one_line_error(r"unknown text perturbation kind 'emoji'", r"allowed: "):
        TextPerturbConfig(kinds=("emoji",))


@pytest.mark.parametrize("rate", [2, 0, -0.1, "nan"])
def test_text_rate_out_of_range(data_dir: Path, rate: Any):
    with one_line_error(r"text_rate must be a number in \(0, 1\]", r"in \(0, 1\]"):
        _docs(kind="text", text_rate=rate)


def test_text_rate_out_of_range_in_config():
    from lm_eval_robust.tasks.perturb.text import TextPerturbConfig

    with one_line_error(r"rate must be a number in \(0, 1\], got 1.5", r"in \(0, 1\]"):
        TextPerturbConfig(rate=1.5)


def test_text_rate_not_a_number():
    from lm_eval_robust.tasks.ni import NIConfig

    with one_line_error(r"text_rate must be a number in \(0, 1\], got 'fast'", r"in \(0, 1\]"):
        NIConfig.from_metadata({"text_rate": "fast"})


def test_unknown_text_scope_in_config():
    from lm_eval_robust.tasks.perturb.text import TextPerturbConfig

    with one_line_error(r"unknown scope 'middle'", r"allowed: all, query"):
        TextPerturbConfig(scope="middle")


def test_unknown_text_scope_in_metadata(data_dir: Path):
    with one_line_error(r"text_scope", r"all, query|'all' or 'query'"):
        _docs(kind="text", text_scope="middle")


def test_unknown_task_alias():
    from lm_eval_robust.tasks.specs import get_spec

    with one_line_error(r"unknown task 'ni999'", r"known tasks: ni065"):
        get_spec("ni999")


def test_unknown_task_alias_cli(capsys: pytest.CaptureFixture[str]):
    cli_error(capsys, ["perturb", "--task", "ni999"], r"unknown task 'ni999'", r"known tasks:")


def test_unknown_split(data_dir: Path):
    with one_line_error(r"unknown split 'dev'", r"use one of \['train', 'test', 'holdout'\]"):
        _docs(split="dev")


def test_unknown_split_cli(capsys: pytest.CaptureFixture[str]):
    cli_error(capsys, ["perturb", "--task", "ni065", "--split", "dev"], r"'dev'", r"train")


def test_perturb_zero_variants_cli(data_dir: Path, capsys: pytest.CaptureFixture[str]):
    argv = ["perturb", "--task", "ni065", "-n", "0"]
    cli_error(capsys, argv, r"(>= 1|at least 1)", r"-n\b")


def test_text_rate_out_of_range_cli(data_dir: Path, capsys: pytest.CaptureFixture[str]):
    argv = ["perturb", "--task", "ni065", "--kind", "text", "-n", "1", "--text-rate", "2"]
    cli_error(capsys, argv, r"rate", r"\(0, 1\]")


def test_example_out_of_range_cli(data_dir: Path, capsys: pytest.CaptureFixture[str]):
    argv = ["perturb", "--task", "ni065", "-n", "1", "--example", "999"]
    cli_error(capsys, argv, r"--example", r"in \[0, \d+\]")


# ---------------------------------------------------------------------------------------------
# fit command


def _fit(features: Path, out: Path, *extra: str) -> list[str]:
    return ["fit", "--task", TASK, "--features", str(features), *extra, "-o", str(out)]


def test_fit_good_features_still_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The synthetic shard is valid: the fit errors below come from the bad input."""
    out = tmp_path / "c.safetensors"
    assert cli_main(_fit(_write_shard(tmp_path / "f"), out, "--lam", "1")) == 0
    assert load(out).task == TASK


def test_fit_unknown_method_settings():
    from lm_eval_robust.stats.fit.run import FitSettings

    with one_line_error(r"unknown fit method 'lasso'", r"use one of \['ridge', 'constant'"):
        FitSettings(method="lasso")


def test_fit_unknown_method_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    argv = _fit(_write_shard(tmp_path / "f"), tmp_path / "c.safetensors", "--method", "lasso")
    cli_error(capsys, argv, r"'lasso'", r"ridge")


def test_fit_features_folder_without_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    (tmp_path / "feats").mkdir()
    argv = _fit(tmp_path / "feats", tmp_path / "c.safetensors")
    cli_error(capsys, argv, r"no feature shards", r"collect_features=DIR")
    assert not (tmp_path / "c.safetensors").exists()


def test_fit_metadata_not_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    argv = ["fit", "--task", TASK, "--metadata", "{n_perturbations: 20", "-o", str(tmp_path / "c")]
    cli_error(capsys, argv, r"--metadata must be JSON", r"""e\.g\. '\{"n_perturbations": 20\}'""")


def test_fit_lam_not_a_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    argv = _fit(_write_shard(tmp_path / "f"), tmp_path / "c.safetensors", "--lam", "abc")
    cli_error(capsys, argv, r"--lam", r"auto")


def test_fit_negative_lam(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    argv = _fit(_write_shard(tmp_path / "f"), tmp_path / "c.safetensors", "--lam", "-1")
    cli_error(capsys, argv, r"lam", r">= 0|auto")


def test_fit_negative_alpha_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    argv = _fit(_write_shard(tmp_path / "f"), tmp_path / "c.safetensors", "--lam", "0")
    cli_error(capsys, [*argv, "--alpha", "-5"], r"--alpha must be a number >= 0", r"'auto'")
    assert not (tmp_path / "c.safetensors").exists()


def test_fit_features_of_another_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    feats = _write_shard(tmp_path / "f")  # ni322_format_pert_train
    out = tmp_path / "c.safetensors"
    argv = ["fit", "--task", "ni065_format_pert", "--features", str(feats), "--lam", "1"]
    cli_error(capsys, [*argv, "-o", str(out)], r"ni322_format_pert", r"ni065_format_pert")
    assert not out.exists()


def test_fit_output_under_a_file(tmp_path: Path, a_file: Path, capsys: pytest.CaptureFixture[str]):
    argv = _fit(_write_shard(tmp_path / "f"), a_file / "c.safetensors", "--lam", "1")
    cli_error(capsys, argv, r"cannot write", r"(writable|another path|-o)")


def test_collect_features_under_a_file(tiny_model_dir: Path, a_file: Path):
    with one_line_error(r"collect_features|cannot write", r"(writable|another)"):
        collecting = _lm(tiny_model_dir, collect_features=str(a_file / "features"))
        collecting.loglikelihood(_requests(TASK), disable_tqdm=True)


# ---------------------------------------------------------------------------------------------
# report


REPORT_PREFIX = "lm-eval-robust report: error: "


def test_report_runs_with_other_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    base = _write_run(tmp_path / "a")
    other = _write_run(tmp_path / "b", n_perturbations=4)
    argv = ["report", str(base), str(other), "-o", str(tmp_path / "out"), *REPORT_FAST]
    cli_error(
        capsys,
        argv,
        r"differ in n_perturbations \(3 vs 4\)",
        r"rerun with the same --metadata",
        prefix=REPORT_PREFIX,
    )


def test_report_runs_of_other_tasks(tmp_path: Path):
    from lm_eval_robust.values.pairing import UnpairableError, label_runs, pair_runs

    base = _write_run(tmp_path / "a", "ni065_format_pert")
    other = _write_run(tmp_path / "b", "ni220_format_pert")
    runs = label_runs([base, other], None)
    with one_line_error(r"share no task", r"(same --tasks|rerun)", cls=UnpairableError):
        pair_runs(*runs)


def test_report_without_log_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    run = _write_run(tmp_path / "a", samples=False)
    argv = ["report", str(run), "-o", str(tmp_path / "out"), *REPORT_FAST]
    cli_error(
        capsys, argv, r"no samples_\*", r"rerun lm_eval with --log_samples", prefix=REPORT_PREFIX
    )


def test_report_folder_without_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    (tmp_path / "empty").mkdir()
    argv = ["report", str(tmp_path / "empty"), "-o", str(tmp_path / "out"), *REPORT_FAST]
    cli_error(
        capsys,
        argv,
        r"no results_\*\.json found",
        r"give the --output_path folder",
        prefix=REPORT_PREFIX,
    )


def test_report_output_under_a_file(
    tmp_path: Path, a_file: Path, capsys: pytest.CaptureFixture[str]
):
    run = _write_run(tmp_path / "a")
    argv = ["report", str(run), "-o", str(a_file / "report"), *REPORT_FAST]
    cli_error(capsys, argv, r"cannot write|-o", r"(writable|another)", prefix=REPORT_PREFIX)


def test_report_good_run_still_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The synthetic runs above are valid: the errors come from the bad input, not the fixture."""
    base, other = _write_run(tmp_path / "a"), _write_run(tmp_path / "b")
    out = tmp_path / "out"
    assert cli_main(["report", str(base), str(other), "-o", str(out), *REPORT_FAST]) == 0
    assert (out / "report.md").is_file()
