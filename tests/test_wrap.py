"""Perturbed variants of any lm-eval task (``<task>_robust_text`` / ``_robust_format``).

User tasks written here (as a user's ``--include_path`` folder) and the stock BIG-bench and GSM8K
tasks read from local copies; the tiny random Llama scores them through the harness.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from lm_eval_robust.tasks.wrap.names import parse
from lm_eval_robust.tasks.wrap.parts import (
    find_parts,
    render_parts,
    sample_prompt_formats,
    split_prompt_formats,
)
from lm_eval_robust.tasks.wrap.settings import WrapError

MC_YAML = """task: toy_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/test.jsonl
    train: {data}/train.jsonl
output_type: multiple_choice
test_split: test
fewshot_split: train
num_fewshot: {shots}
doc_to_text: "Question: {{{{question}}}}\\nOptions:\\nA. {{{{options[0]}}}}\\n\\
B. {{{{options[1]}}}}\\nC. {{{{options[2]}}}}\\nAnswer:"
doc_to_target: "{{{{label}}}}"
doc_to_choice: ["A", "B", "C"]
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

GEN_YAML = """task: toy_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/test.jsonl
output_type: generate_until
test_split: test
doc_to_text: "Q: {{{{question}}}}\\nA:"
doc_to_target: "{{{{options[label]}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 4
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

ROLLING_YAML = """task: toy_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/test.jsonl
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: "{{{{question}}}}"
metadata:
  version: 1.0
"""

GROUP_YAML = """group: toy_group
task:
  - toy_mc
metadata:
  version: 1.0
"""

WORDS = "red green blue yellow purple orange black white".split()


def _rows(n: int, offset: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        opts = [WORDS[(i + offset + k) % len(WORDS)] for k in range(3)]
        rows.append(
            {
                "question": f"Which colour comes first in the list number {i + offset}?",
                "options": opts,
                "label": (i + offset) % 3,
            }
        )
    return rows


@pytest.fixture(scope="module")
def user_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("user_tasks")
    data = root / "data"
    data.mkdir()
    for split, n, off in (("test", 12, 0), ("train", 8, 100)):
        (data / f"{split}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in _rows(n, off)), encoding="utf-8"
        )
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "toy_mc.yaml").write_text(MC_YAML.format(data=data, shots=2), encoding="utf-8")
    (tasks / "toy_gen.yaml").write_text(GEN_YAML.format(data=data), encoding="utf-8")
    (tasks / "toy_rolling.yaml").write_text(ROLLING_YAML.format(data=data), encoding="utf-8")
    (tasks / "toy_group.yaml").write_text(GROUP_YAML, encoding="utf-8")
    return tasks


def _manager(path: Path, **metadata: Any) -> Any:
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    lm_eval_robust.register()
    return TaskManager(include_path=str(path), include_defaults=False, metadata=metadata)


def _contexts(task: Any, limit: int | None = None) -> list[tuple[Any, ...]]:
    """(context, continuation or generation args) of every request, as the harness builds them."""
    task.set_fewshot_seed(1234)
    task.build_all_requests(limit=limit, rank=0, world_size=1)
    return [tuple(inst.arguments) for inst in task.instances]


def test_names_parse() -> None:
    v = parse("bigbench_navigate_multiple_choice_robust_format_train")
    assert v is not None and (v.base, v.kind, v.split) == (
        "bigbench_navigate_multiple_choice",
        "format",
        "train",
    )
    assert parse("gsm8k_robust_text").split == "all"  # type: ignore[union-attr]
    assert parse("ni065_format_pert") is None  # the package's own tasks are not variants


@pytest.mark.parametrize("kind", ["text", "format"])
def test_clean_prompts_are_the_harness_rendering(user_tasks: Path, kind: str) -> None:
    """The clean prompts (2-shot, random sampler) equal the stock task's own requests, byte for
    byte, and every perturbed prompt keeps the scored continuations."""
    tm = _manager(user_tasks, n_perturbations=3)
    plain = _contexts(tm.load(["toy_mc"])["tasks"]["toy_mc"])
    name = f"toy_mc_robust_{kind}"
    wrapped_task = tm.load([name])["tasks"][name]
    wrapped = _contexts(wrapped_task)
    n = len(plain)
    assert n == 12 * 3 and len(wrapped) == 4 * n
    assert wrapped[:n] == plain  # round 0: the clean prompts, in the stock order
    clean_ctx = [c for c, _ in plain]
    for r in range(1, 4):
        rnd = wrapped[r * n : (r + 1) * n]
        changed = sum(c != clean for (c, _), clean in zip(rnd, clean_ctx, strict=True))
        assert changed == n  # every perturbed prompt differs from its clean prompt
        conts = [cont.strip() for _, cont in rnd]
        assert conts == [cont.strip() for _, cont in plain]  # the same choices are scored


def test_text_perturbation_touches_the_query_only(user_tasks: Path) -> None:
    tm = _manager(user_tasks, n_perturbations=2)
    plain = _contexts(tm.load(["toy_mc"])["tasks"]["toy_mc"])
    wrapped = _contexts(tm.load(["toy_mc_robust_text"])["tasks"]["toy_mc_robust_text"])
    n = len(plain)
    for (clean, _), (pert, cont) in zip(plain, wrapped[n:], strict=False):
        demos = clean[: clean.rfind("Question:")]
        assert pert.startswith(demos)  # demonstrations untouched (text_scope=query)
        for cue in ("Question:", "Options:", "\nA. ", "\nB. ", "\nC. ", "Answer:"):
            assert cue in pert[len(demos) :]  # descriptors and option markers protected
        assert pert.endswith("Answer:") and cont in (" A", " B", " C")


def test_format_sets_disjoint_and_parts_rendered() -> None:
    pool = sample_prompt_formats(60, seed=("toy", 1))
    assert len(set(pool)) == 60 and all(f.is_valid() for f in pool)
    sets = split_prompt_formats(pool, (0.5, 0.35, 0.15), seed=("toy", 1))
    assert [len(sets[s]) for s in ("train", "test", "holdout")] == [30, 21, 9]
    assert not set(sets["train"]) & set(sets["test"])
    assert not set(sets["test"]) & set(sets["holdout"])
    text = "Question: Which?\nOptions:\nA. red\nB. green\nAnswer:"
    parts = find_parts(text)
    assert [d.words for d in parts.descriptors] == ["Question", "Options", "Answer"]
    assert [m.label for m in parts.markers] == ["A", "B"]
    fmt = next(f for f in pool if f.item_wrapper == "({x})" and f.casing == "upper")
    out = render_parts(text, fmt, parts)
    assert "(A)" in out and "(B)" in out and "QUESTION" in out
    assert out.endswith("ANSWER" + fmt.separator.rstrip())
    assert "Which?" in out and "red" in out and "green" in out
    assert not find_parts("plain text without any field").found


def test_prompt_without_parts_gets_text_perturbations(
    user_tasks: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    text = (user_tasks / "toy_gen.yaml").read_text(encoding="utf-8")
    text = text.replace("task: toy_gen", "task: toy_bare").replace(
        '"Q: {{question}}\\nA:"', '"{{question}}"'
    )
    (bare / "toy_bare.yaml").write_text(text, encoding="utf-8")
    tm = _manager(bare, n_perturbations=2)
    with caplog.at_level(logging.WARNING):
        task = tm.load(["toy_bare_robust_format"])["tasks"]["toy_bare_robust_format"]
        _contexts(task)
    lines = [r.getMessage() for r in caplog.records if "text perturbations only" in r.getMessage()]
    assert len(lines) == 1 and "toy_bare_robust_format" in lines[0]
    kinds = {doc["_lmer"]["variant"] for doc in task.eval_docs if doc["_lmer"]["pert_id"] > 0}
    assert kinds <= {"zero_width", "confusable", "markup", "typo"}


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("toy_nothing_robust_text", "knows no task 'toy_nothing'"),
        ("toy_rolling_robust_text", "loglikelihood_rolling task"),
        ("toy_group_robust_format", "toy_group is a group"),
    ],
)
def test_bad_names_are_one_line_errors(user_tasks: Path, name: str, match: str) -> None:
    tm = _manager(user_tasks)
    with pytest.raises(WrapError, match=match) as err:
        tm.match_tasks([name])  # the CLI resolves names before it loads a model
    assert "\n" not in str(err.value)


def test_missing_local_data_is_one_line(user_tasks: Path, tmp_path: Path) -> None:
    (tmp_path / "bigbench" / "navigate_zero_shot").mkdir(parents=True)
    from lm_eval_robust.tasks.wrap.local_data import apply_local_data

    cfg = {
        "task": "x",
        "dataset_path": "hails/bigbench",
        "dataset_name": "navigate_zero_shot",
        "test_split": "default",
    }
    with pytest.raises(WrapError, match=r"default\.jsonl not found") as err:
        apply_local_data(cfg, tmp_path)
    assert "\n" not in str(err.value)
    assert (
        apply_local_data({**cfg, "dataset_name": "other"}, tmp_path)["dataset_path"]
        == "hails/bigbench"
    )


def test_offline_dataset_missing_is_one_line(
    user_tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (tmp_path / "t.yaml").write_text(
        "task: toy_hub\ndataset_path: nobody/no_such_dataset\noutput_type: multiple_choice\n"
        "test_split: test\ndoc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: ['a', 'b']\n",
        encoding="utf-8",
    )
    tm = _manager(tmp_path)
    with pytest.raises(WrapError, match="not available offline") as err:
        tm.match_tasks(["toy_hub_robust_text"])
    assert "\n" not in str(err.value) and "local_data" in str(err.value)


@pytest.mark.slow
def test_end_to_end_multiple_choice_and_generation(user_tasks: Path, tiny_model_dir: Path) -> None:
    """Both output types through the harness: the stock metric's clean/perturbed/drop and the
    BAC family, each with a clustered stderr in the results."""
    import lm_eval

    tm = _manager(user_tasks, n_perturbations=2)
    out = lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": str(tiny_model_dir), "dtype": "float32", "device": "cpu"},
        tasks=["toy_mc_robust_format", "toy_gen_robust_text"],
        task_manager=tm,
        bootstrap_iters=50,
    )
    assert out is not None
    mc = out["results"]["toy_mc_robust_format"]
    for key in (
        "stock_acc_clean",
        "stock_acc_pert",
        "stock_acc_drop",
        "robust_bac_clean",
        "robust_bac_pert",
        "robust_delta_drop",
        "robust_bac_worst",
        "robust_consistency",
        "robust_fmt_spread",
        "robust_tie_share",
    ):
        assert isinstance(mc[f"{key},none"], float), key
    assert isinstance(mc["stock_acc_clean_stderr,none"], float)
    assert isinstance(mc["robust_bac_clean_stderr,none"], float)
    assert mc["stock_acc_drop,none"] == pytest.approx(
        mc["stock_acc_pert,none"] - mc["stock_acc_clean,none"]
    )
    gen = out["results"]["toy_gen_robust_text"]
    assert "stock_exact_match_clean,none" in gen and "robust_bac_clean,none" not in gen
    # the clean score is the stock task's own number on the same docs
    plain = lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": str(tiny_model_dir), "dtype": "float32", "device": "cpu"},
        tasks=["toy_mc"],
        task_manager=tm,
        bootstrap_iters=0,
    )
    assert plain is not None
    assert mc["stock_acc_clean,none"] == pytest.approx(plain["results"]["toy_mc"]["acc,none"])


def test_bigbench_converter_schema(tmp_path: Path, data_dir: Path) -> None:
    from lm_eval_robust.tasks.wrap.convert import convert_bigbench, convert_gsm8k

    counts = convert_bigbench(data_dir / "bigbench", tmp_path)
    assert counts["logical_deduction"] == 1500 and counts["navigate"] == 1000
    rows = [
        json.loads(line)
        for line in (tmp_path / "bigbench" / "date_understanding_zero_shot" / "default.jsonl")
        .read_text(encoding="utf-8")
        .splitlines()
    ]
    assert len(rows) == 369
    for r in rows:
        assert set(r) == {
            "idx",
            "inputs",
            "targets",
            "multiple_choice_targets",
            "multiple_choice_scores",
        }
        assert r["targets"][0] in r["multiple_choice_targets"]
        assert r["multiple_choice_scores"][r["multiple_choice_targets"].index(r["targets"][0])] == 1
    assert convert_gsm8k(data_dir / "gsm8k", tmp_path) == 1319


def _task_run(task: str, label_set: str, n: int, seed: int) -> Any:
    """A wrapped task's logged items: a model that prefers label 0 by 1.5 nats on every prompt."""
    import numpy as np

    from lm_eval_robust.values.pairing import TaskRun

    rng = np.random.default_rng(seed)
    items = {}
    for e in range(n):
        gold = e % 2
        for pid in range(3):
            signal = rng.normal(0.8, 1.0)
            ll = [
                -2.0 + (signal if gold == 0 else 0.0) + 1.5,
                -2.0 + (signal if gold == 1 else 0.0),
            ]
            items[(str(e), pid)] = {
                "task": task,
                "example_id": str(e),
                "pert_id": pid,
                "gold": gold,
                "pred": int(ll[1] > ll[0]),
                "tied": False,
                "margin": 0.0,
                "ll": ll,
                "variant": "clean" if pid == 0 else f"v{pid}",
            }
    config = {"wrapped_task": {"label_set": label_set}}
    return TaskRun(task, "text", "train", items, {}, config)


def test_label_offset_debiasing_fixed_labels_only() -> None:
    from lm_eval_robust.report.wrap_debias import DebiasError, debias_task, to_markdown

    train = _task_run("t_robust_text_train", "fixed", 200, 0)
    test = _task_run("t_robust_text_test", "fixed", 140, 1)
    res = debias_task(train, test, n_resamples=200)
    assert res.beta[0] > res.beta[1]  # the preferred label gets the larger offset
    assert res.after["bac_clean"] > res.before["bac_clean"] + 0.05
    assert res.after["maj_share_pert"] < res.before["maj_share_pert"]
    assert all(v > 0 for v in res.change_se.values() if v == v)
    assert "bac_pert" in to_markdown([res])
    with pytest.raises(DebiasError, match="differ per doc") as err:
        debias_task(_task_run("u_robust_text_train", "per-doc", 20, 0), test)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_stock_bigbench_and_gsm8k_offline(tmp_path: Path, data_dir: Path) -> None:
    """lm-eval's own bigbench_*_multiple_choice and gsm8k configs, pointed at local copies: the
    wrapped clean requests are the stock task's requests for the same docs."""
    from lm_eval.tasks import TaskManager

    import lm_eval_robust
    from lm_eval_robust.tasks.wrap.convert import convert_bigbench, convert_gsm8k

    convert_bigbench(data_dir / "bigbench", tmp_path)
    convert_gsm8k(data_dir / "gsm8k", tmp_path)
    lm_eval_robust.register()
    tm = TaskManager(metadata={"local_data": str(tmp_path), "n_examples": 6, "n_perturbations": 1})
    for stock in ("bigbench_snarks_multiple_choice", "gsm8k"):
        for kind in ("text", "format"):
            name = f"{stock}_robust_{kind}"
            task = tm.load([name])["tasks"][name]
            wrapped = task.eval_docs
            ids = sorted({d["_lmer"]["example"] for d in wrapped})
            task.set_fewshot_seed(1234)
            task.build_all_requests(rank=0, world_size=1)
            clean = [i.arguments for i in task.instances if i.doc["_lmer"]["pert_id"] == 0]
            pert = [i.arguments for i in task.instances if i.doc["_lmer"]["pert_id"] == 1]
            base = tm.load([stock])["tasks"][stock]
            base.set_fewshot_seed(1234)
            base.build_all_requests(rank=0, world_size=1, limit=max(ids) + 1)
            by_doc: dict[int, list[Any]] = {}
            for inst in base.instances:
                by_doc.setdefault(inst.doc_id, []).append(inst.arguments)
            assert clean == [a for i in ids for a in by_doc[i]], name
            assert len(pert) == len(clean) and all(
                p[0] != c[0] or p[1] != c[1] for p, c in zip(pert, clean, strict=True)
            )


def _lm_eval(*args: str, cwd: Path) -> Any:
    import os
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("lm_eval")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_cli_run_feeds_the_leaderboard(
    user_tasks: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """``lm_eval --tasks <task>_robust_format`` from a user's --include_path, logged, read by the
    leaderboard like our own tasks."""
    from lm_eval_robust.report.leaderboard import build_leaderboard
    from lm_eval_robust.values.pairing import load_run

    out = tmp_path / "run"
    proc = _lm_eval(
        "--model",
        "hf",
        "--model_args",
        f"pretrained={tiny_model_dir},dtype=float32",
        "--device",
        "cpu",
        "--include_path",
        str(user_tasks),
        "--tasks",
        "toy_mc_robust_format",
        "--metadata",
        '{"n_perturbations": 2}',
        "--output_path",
        str(out),
        "--log_samples",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = load_run(next(out.iterdir()))
    assert run.tasks["toy_mc_robust_format"].kind == "format"
    board = build_leaderboard([run], n_resamples=200)
    row = board.row(run.label, "format", "toy_mc_robust_format")
    assert row is not None and row.n_examples == 12


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("toy_nothing_robust_text", "lm-eval knows no task 'toy_nothing'"),
        ("toy_rolling_robust_format", "perturbed variants exist for multiple_choice"),
        ("toy_group_robust_text", "toy_group is a group"),
    ],
)
def test_cli_bad_names_one_line_before_the_model(
    user_tasks: Path, tmp_path: Path, task: str, message: str
) -> None:
    proc = _lm_eval(
        "--model",
        "hf",
        "--model_args",
        "pretrained=/nonexistent/model",
        "--include_path",
        str(user_tasks),
        "--tasks",
        task,
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "lm-eval-robust: error:" in ln]
    assert len(lines) == 1 and message in lines[0], proc.stderr[-1500:]
    assert "Traceback" not in proc.stderr and "/nonexistent/model" not in proc.stderr
