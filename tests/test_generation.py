"""Generation tasks: data, prompts, docs, metrics and the harness path (no real model)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.tasks.generation import metrics as M
from lm_eval_robust.tasks.generation.tasks import GEN_TASKS, GenConfig, build_docs, process_results

SMALL = {"n_examples": 12, "n_train": 4, "n_perturbations": 5, "n_fit_perturbations": 2}


def test_exact_match_uses_every_alias_and_harness_normalisation() -> None:
    answers = ["Sunset Blvd", "Sunset Boulevard"]
    assert M.exact_match_any("sunset boulevard.", answers) == 1.0
    assert M.exact_match_any("The Sunset Boulevard", answers) == 1.0
    assert M.exact_match_any("Sunset", answers) == 0.0
    assert M.score_generation("em", " Paris, France\nQ:", ["paris"], ("\n", ",")) == {"em": 1.0}
    assert M.score_generation("em", " Lyon", ["paris"], ("\n",)) == {"em": 0.0}


def test_gsm8k_final_number() -> None:
    assert M.gsm8k_number("so 3+4=7\n#### 1,234") == "1234"
    assert M.gsm8k_number("She pays $18.") == "18"
    assert M.gsm8k_number("first 12 then 40 then 5") == "5"
    assert M.gsm8k_number("no digits") is None
    assert M.score_generation("em_number", " 2*9 = 18\n#### 18", ["18"])["em"] == 1.0
    assert M.score_generation("em_number", " the answer is 17", ["18"])["em"] == 0.0


def test_f1_and_rouge_values() -> None:
    assert M.token_f1("the cat sat", "a cat sat down") == pytest.approx(2 * 1 * (2 / 3) / (5 / 3))
    assert M.rouge_n("a b c d", "a b x d", 1) == pytest.approx(0.75)
    assert M.rouge_n("a b c d", "a b x d", 2) == pytest.approx(1 / 3)
    assert M.rouge_l("a b c d", "a x c d") == pytest.approx(0.75)
    s = M.score_generation("f1", " Men get support.\nArticle", ["men get support"], ("\n",))
    assert s["f1"] == 1.0 and s["rougeL"] == 1.0 and s["rouge2"] == 1.0


def _items(scores: dict[tuple[str, int], float]) -> list[dict]:
    return [{"example_id": ex, "pert_id": p, "scores": {"em": v}} for (ex, p), v in scores.items()]


def test_aggregations_group_by_ids_in_any_order() -> None:
    scores = {("a", 0): 1.0, ("a", 3): 0.0, ("a", 4): 1.0, ("b", 0): 0.0, ("b", 3): 0.0}
    scores[("b", 4)] = 0.0
    items = _items(scores)
    random.Random(0).shuffle(items)
    assert M.em_clean(items) == pytest.approx(50.0)
    assert M.em_pert(items) == pytest.approx(25.0)  # a: 0.5, b: 0.0
    assert M.em_drop(items) == pytest.approx(-25.0)
    assert M.em_drop(items + items[:2]) == pytest.approx(-25.0)  # duplicates count once


def test_docs_protocol_split_and_order(data_dir: Path) -> None:
    cfg = GenConfig.from_metadata(SMALL)
    train = build_docs("nq_open", "text", "train", cfg)
    test = build_docs("nq_open", "text", "test", cfg)
    assert len(train) == 4 * 3 and len(test) == 8 * 4
    assert {d["pert_id"] for d in train} == {0, 1, 2}
    assert {d["pert_id"] for d in test} == {0, 3, 4, 5}
    assert not {d["example_id"] for d in train} & {d["example_id"] for d in test}
    assert [d["pert_id"] for d in test[:8]] == [0] * 8  # round-major: all clean prompts first
    clean = {d["example_id"]: d["prompt"] for d in test if d["pert_id"] == 0}
    for d in test:
        assert d["prompt"].count("Q: ") == 1  # the protected cue, once (no demonstrations)
        assert d["prompt"].endswith("?\nA:")  # the protected cue survives every perturbation
        assert (d["prompt"] == clean[d["example_id"]]) == (d["pert_id"] == 0)
    clean_only = build_docs("nq_open", "clean", "test", cfg)
    assert [d["prompt"] for d in clean_only] == [d["prompt"] for d in test[:8]]


@pytest.mark.parametrize("name", sorted(GEN_TASKS))
def test_prompts_of_every_task(name: str, data_dir: Path) -> None:
    cfg = GenConfig.from_metadata({**SMALL, "max_doc_words": 50})
    docs = build_docs(name, "text", "test", cfg)
    task = GEN_TASKS[name]
    for d in docs:
        assert d["prompt"].endswith(task.answer_cue)
        assert not d["prompt"].endswith("??" + task.answer_cue)
        assert d["answers"] and d["target"] == d["answers"][0]
    n_demos = docs[0]["prompt"].count(task.answer_cue) - 1
    assert n_demos == task.n_shots
    if name == "gsm8k":
        assert "#### " in docs[0]["prompt"] and docs[0]["answers"][0].lstrip("-").isdigit()


def test_config_errors_are_one_line(data_dir: Path) -> None:
    bad = [
        {"n_train": 12, "n_examples": 12},
        {"n_fit_perturbations": 5, "n_perturbations": 5},
        {"n_examples": "many"},
        {"text_kinds": "nope"},
        {"text_rate": 2},
    ]
    for md in bad:
        with pytest.raises(UserError) as info:
            GenConfig.from_metadata(md)
        assert "\n" not in str(info.value)
    with pytest.raises(UserError, match="fewer than n_examples"):
        build_docs("gsm8k", "clean", "test", GenConfig.from_metadata({"n_examples": 5000}))


def test_missing_data_dir_is_one_line(tmp_path: Path) -> None:
    from lm_eval_robust.tasks.generation.data import load_records

    with pytest.raises(UserError, match="does not exist"):
        load_records("nq_open", tmp_path / "nope")
    with pytest.raises(UserError, match=r"nq_open/NQ-open\.dev\.jsonl not found"):
        load_records("nq_open", tmp_path)
    (tmp_path / "xsum").mkdir()
    (tmp_path / "xsum" / "test_1000.jsonl").write_text('{"document": "x"}\n', encoding="utf-8")
    with pytest.raises(UserError, match="line 1 is not a xsum record"):
        load_records("xsum", tmp_path)


def test_process_results_carries_ids(data_dir: Path) -> None:
    doc = build_docs("gsm8k", "text", "test", GenConfig.from_metadata(SMALL))[-1]
    out = process_results(doc, [f" so\n#### {doc['answers'][0]}"])
    assert set(out) == {"robust_em_clean", "robust_em_pert", "robust_em_drop"}
    item = out["robust_em_pert"]
    assert item["pert_id"] == doc["pert_id"] > 0 and item["scores"]["em"] == 1.0


_DIGEST = """
import hashlib, sys
from lm_eval_robust.tasks.generation.tasks import GenConfig, build_docs
cfg = GenConfig.from_metadata({md})
h = hashlib.sha256()
for name in ("nq_open", "xsum"):
    for d in build_docs(name, "text", "train", cfg):
        h.update(d["prompt"].encode("utf-8"))
print(h.hexdigest())
"""


def test_prompts_byte_identical_across_processes(data_dir: Path) -> None:
    code = _DIGEST.format(md=json.dumps({**SMALL, "max_doc_words": 40}))
    digests = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "LM_EVAL_ROBUST_DATA_DIR": str(data_dir)}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1
    h = hashlib.sha256()
    cfg = GenConfig.from_metadata({**SMALL, "max_doc_words": 40})
    for name in ("nq_open", "xsum"):
        for d in build_docs(name, "text", "train", cfg):
            h.update(d["prompt"].encode("utf-8"))
    assert digests == {h.hexdigest()}


def test_task_names_do_not_shadow_the_harness() -> None:
    """Our generation tasks carry the ``robust_`` namespace (the harness's own ``gsm8k``,
    ``nq_open``, ... and their wildcards are checked against lm-eval's task index in
    tests/test_plugin.py::test_bare_lm_eval_sees_our_names_only_where_asked)."""
    from lm_eval_robust.requests.generation_yamls import render_gen_yamls

    ours = {n[: -len(".yaml")] for n in render_gen_yamls("") if n.endswith(".yaml")}
    assert "robust_nq_open_text_pert" in ours and "robust_gsm8k_clean_train" in ours
    assert len(ours) == 16
    assert all(n.startswith("robust_") for n in ours)
    for name in ("nq_open", "gsm8k", "triviaqa", "xsum"):
        assert not [n for n in ours if n.startswith(name)], name


@pytest.mark.slow
def test_harness_run_on_tiny_model(tiny_model_dir: Path, data_dir: Path) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    lm_eval_robust.register()
    tm = TaskManager(include_path=lm_eval_robust.task_dir(), metadata=dict(SMALL))
    out = lm_eval.simple_evaluate(
        model="debiased_hf",
        model_args={"pretrained": str(tiny_model_dir), "dtype": "float32", "device": "cpu"},
        tasks=["robust_triviaqa_text_pert", "robust_xsum_clean"],
        task_manager=tm,
        batch_size=8,
        gen_kwargs={"max_gen_toks": 4},
    )
    res = out["results"]
    tq = res["robust_triviaqa_text_pert"]
    drop, pert, clean = (tq[f"robust_em_{p},none"] for p in ("drop", "pert", "clean"))
    assert drop == pytest.approx(pert - clean)
    assert 0.0 <= clean <= 100.0
    xsum = {k.split(",")[0] for k in res["robust_xsum_clean"] if "," in k}
    assert xsum >= {"robust_f1_clean", "robust_rougeL_clean"} and "robust_f1_drop" not in xsum
    # clustered bootstrap standard errors, where lm-eval would write "N/A"
    for key in ("robust_em_clean_stderr,none", "robust_em_drop_stderr,none"):
        assert isinstance(tq[key], float) and tq[key] >= 0.0, key
    assert isinstance(res["robust_xsum_clean"]["robust_f1_clean_stderr,none"], float)


def test_table_p_recover_from_run_folders(tmp_path: Path) -> None:
    from lm_eval_robust.report.generation.table import read_runs, render

    def write(label: str, clean: float, pert: float) -> None:
        d = tmp_path / "runs" / f"{label}_qa" / "model"
        d.mkdir(parents=True)
        res = {"em_clean,none": clean, "em_pert,none": pert, "em_drop,none": pert - clean}
        res["em_clean_stderr,none"] = "N/A"
        (d / "results_1.json").write_text(json.dumps({"results": {"nq_open_text_pert": res}}))

    write("base", 40.0, 20.0)
    base = next((tmp_path / "runs").glob("base_qa/model/results_1.json"))
    doc = json.loads(base.read_text())
    doc["results"]["nq_open_text_pert"]["em_drop_stderr,none"] = 5.0
    base.write_text(json.dumps(doc))
    write("L4", 38.0, 30.0)
    write("L17-all", 40.0, 10.0)
    text = render(read_runs(tmp_path))
    assert "| δ_drop | -20.0 [-29.8, -10.2] |" in text  # ± 1.96 × the stderr
    assert "| perturbed (base) | 20.0 |" in text  # no stderr: no interval
    assert "| L4 p_recover | 50.0 |" in text and "| L4 δ_clean | -2.0 |" in text
    assert "| L17-all p_recover | -50.0 |" in text
    assert text.index("L4 p_recover") < text.index("L17-all p_recover")


def test_table_reads_runs_with_old_and_new_names_alike(tmp_path: Path) -> None:
    from lm_eval_robust.report.generation.table import read_runs, render

    def write(root: Path, label: str, clean: float, pert: float, new: bool) -> None:
        d = root / "runs" / f"{label}_qa" / "model"
        d.mkdir(parents=True)
        p = "robust_" if new else ""
        res = {f"{p}em_clean,none": clean, f"{p}em_pert,none": pert}
        res[f"{p}em_drop,none"] = pert - clean
        res[f"{p}em_drop_stderr,none"] = 2.0
        task = f"{p}nq_open_text_pert"
        (d / "results_1.json").write_text(json.dumps({"results": {task: res}}))

    for new in (False, True):
        write(tmp_path / str(new), "base", 40.0, 20.0, new)
        write(tmp_path / str(new), "L4", 38.0, 30.0, new)
    old, new_ = (render(read_runs(tmp_path / str(n))) for n in (False, True))
    assert old == new_ and "| L4 p_recover | 50.0 |" in old


def test_table_p_recover_needs_a_drop(tmp_path: Path) -> None:
    # the base run's perturbed score above its clean one is no drop: nothing to recover
    from lm_eval_robust.report.generation.table import read_runs, render

    for label, clean, pert in (("base", 4.0, 5.0), ("L7", 4.0, 4.0)):
        d = tmp_path / "runs" / f"{label}_qa" / "model"
        d.mkdir(parents=True)
        res = {"em_clean,none": clean, "em_pert,none": pert, "em_drop,none": pert - clean}
        (d / "results_1.json").write_text(json.dumps({"results": {"nq_open_text_pert": res}}))
    assert "| L7 p_recover | n/a (no drop) |" in render(read_runs(tmp_path))
