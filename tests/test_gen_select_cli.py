"""``fit --layer L --select generation``: candidate corrections scored by real generation.

The tiny random Llama of ``conftest.py`` generates; the scorer's generations must be the ones an
evaluation with ``layer_correction=`` produces, its scores must follow the generations, and the
command must write one selected correction per layer with its cross-validation table.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lm_eval_robust.scoring.generation.fit import (
    LayerCorrection,
    load_layer_correction,
    save_layer_correction,
)
from lm_eval_robust.scoring.generation.gen_score import (
    GenerationScorer,
    generation_kwargs,
    n_generations,
)
from lm_eval_robust.scoring.generation.layers import decoder_layers
from lm_eval_robust.tasks.generation.metrics import cut_at_stop, normalise_answer
from lm_eval_robust.tasks.generation.tasks import get_task

MD = {"n_examples": 14, "n_train": 6, "n_perturbations": 4, "n_fit_perturbations": 2}


@pytest.fixture(scope="module")
def lm(tiny_model_dir: Path):
    from lm_eval_robust.scoring.model import DebiasedHFLM

    return DebiasedHFLM(pretrained=str(tiny_model_dir), dtype="float32", device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def docs(data_dir: Path) -> list[dict]:
    from lm_eval_robust.tasks.generation.tasks import GenConfig, build_docs

    return build_docs("nq_open", "text", "train", GenConfig.from_metadata(dict(MD)))


def _strong_correction(lm, seed: int = 1) -> LayerCorrection:
    rng = np.random.default_rng(seed)
    n = lm.model.config.hidden_size
    h = rng.normal(size=(n, 1))
    h /= np.linalg.norm(h)
    return LayerCorrection(
        layer=0,
        num_layers=len(decoder_layers(lm.model)),
        H=h,
        mu=np.zeros(n),
        W=np.zeros((n + 1, 1)),
        beta=np.array([40.0]),  # moves every last prompt token 40 along h
        task="nq_open_text_pert",
        fingerprint=lm.fingerprint,
    )


def _scorer(lm, docs, gen_kwargs=None) -> GenerationScorer:
    clean = [i for i, d in enumerate(docs) if d["pert_id"] == 0]
    pert = [i for i, d in enumerate(docs) if d["pert_id"] != 0]
    task = get_task("nq_open")
    kwargs = generation_kwargs(task, gen_kwargs or {"max_gen_toks": 4})
    return GenerationScorer(lm, task, "nq_open_text_pert", docs, clean, pert, kwargs)


def test_scorer_generates_as_an_evaluation_with_layer_correction(
    lm, docs, tiny_model_dir, tmp_path
):
    from lm_eval.api.instance import Instance

    from lm_eval_robust.scoring.model import DebiasedHFLM

    corr = _strong_correction(lm)
    scorer = _scorer(lm, docs)
    ids = list(range(8))
    base = scorer.generations(None, ids)
    edited = scorer.generations(corr, ids)
    assert base != edited  # the candidate correction acts on the generations
    save_layer_correction(corr, tmp_path / "nq.safetensors")
    evaluating = DebiasedHFLM(
        pretrained=str(tiny_model_dir),
        dtype="float32",
        device="cpu",
        batch_size=4,
        layer_correction=str(tmp_path / "nq.safetensors"),
    )
    kwargs = generation_kwargs(get_task("nq_open"), {"max_gen_toks": 4})
    reqs = [
        Instance(
            "generate_until",
            docs[i],
            (docs[i]["prompt"], dict(kwargs)),
            i,
            metadata=("nq_open_text_pert_train", i, 1),
        )
        for i in ids
    ]
    assert evaluating.generate_until(reqs, disable_tqdm=True) == edited
    assert lm._layer_corrections == {}  # nothing left installed on the scoring model


@pytest.mark.slow
def test_scores_follow_the_generations_and_base_is_generated_once(lm, docs) -> None:
    corr = _strong_correction(lm)
    scorer = _scorer(lm, docs)
    ids = list(range(6))
    base = scorer.generations(None, ids)
    # the uncorrected model's answers as references: exact match 1 without the correction, and
    # with it 1 exactly where the corrected answer normalises to the same text
    until = get_task("nq_open").until
    answered = [dict(d) for d in docs]
    for i, g in zip(ids, base, strict=True):
        answered[i]["answers"] = [cut_at_stop(g, until)]
    scorer2 = _scorer(lm, answered)
    assert scorer2.score_docs(None, ids) == [1.0] * len(ids)
    edited = scorer2.generations(corr, ids)
    scores = scorer2.score_docs(corr, ids)
    same = [
        normalise_answer(cut_at_stop(g, until)) == normalise_answer(cut_at_stop(b, until))
        for g, b in zip(edited, base, strict=True)
    ]
    assert scores == [float(x) for x in same]
    assert not all(same)  # the correction changed some answers, and they scored 0
    n = scorer2.n_generated
    scorer2.score_docs(None, ids)  # cached: no generation
    assert scorer2.n_generated == n
    c, p = scorer2(None, np.array([0]), np.array([0, 1]))
    assert len(c) == 1 and len(p) == 2
    assert n_generations(10, 2, 6) == 10 * 13


def _fit(tiny_model_dir: Path, *extra: str) -> list[str]:
    return [
        "fit",
        "--task",
        "nq_open_text_pert",
        "--pretrained",
        str(tiny_model_dir),
        "--model-args",
        "dtype=float32",
        "--metadata",
        json.dumps(MD),
        "--batch-size",
        "8",
        *extra,
    ]


@pytest.mark.slow
def test_cli_select_generation_per_layer(tiny_model_dir, data_dir, tmp_path, capsys) -> None:
    from lm_eval_robust.cli import main

    out = tmp_path / "sel"
    argv = _fit(tiny_model_dir, "--layer", "0,1", "--select", "generation", "-o", str(out))
    argv += ["--k_grid", "1,2", "--lam_grid", "1e-2,1", "--gen_folds", "2"]
    argv += ["--gen_kwargs", "max_gen_toks=3"]
    assert main(argv) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [x["layer"] for x in lines] == [0, 1]
    n_prompts = 6 * 3  # 6 train examples, clean + 2 fitting perturbations
    for line in lines:
        assert line["select"] == "generation"
        assert set(line["cv"]) == {
            "none",
            "k=1,lam_rel=0.01",
            "k=1,lam_rel=1",
            "k=2,lam_rel=0.01",
            "k=2,lam_rel=1",
        }
        corr = load_layer_correction(Path(line["out"]))
        sel = corr.stats["generation_selection"]
        assert sel["gen_kwargs"]["max_gen_toks"] == 3
        assert sel["n_folds"] == 2 and len(sel["table"]) == 5
        for row in sel["table"]:
            assert len(row["score_pert_folds"]) == 2
            assert 0.0 <= row["score_pert"] <= 1.0
            assert row["n_prompts"] == n_prompts  # every train prompt held out once
            assert 0 <= row["changed"] <= n_prompts
        assert sel["table"][0]["changed"] == 0  # no correction changes nothing
        assert [v[2] for v in line["cv"].values()] == [r["changed"] for r in sel["table"]]
        if sel["chosen"] == "none":
            assert np.allclose(corr.W, 0.0) and np.allclose(corr.beta, 0.0)
            assert "identity" in line["note"]
        else:
            assert corr.k == sel["chosen"]["k"]
    # no correction generated once for both layers, each layer's 4 settings once per prompt
    assert lines[0]["n_generations"] == n_prompts * 5
    assert lines[1]["n_generations"] == n_prompts * 4
    assert (out / "L1" / "nq_open_text_pert.safetensors").is_file()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--layer", "0", "--select", "generation", "--k", "2"], "drop --k and --lam"),
        (["--layer", "0", "--select", "generation", "--lam", "3"], "drop --k and --lam"),
        (["--layer", "0", "--k_grid", "1,2"], "settings of --select generation"),
        (["--layer", "0", "--select", "generation", "--k_grid", "0,x"], "--k_grid must be"),
        (["--layer", "0", "--select", "generation", "--lam_grid", "-1"], "--lam_grid must be"),
        (
            ["--layer", "0", "--select", "generation", "--gen_kwargs", "do_sample=True"],
            "greedy",
        ),
        (["--select", "generation"], "intermediate-layer fits"),
        (["--layer", "0", "--select", "generation", "--gen_folds", "1"], "--gen_folds must be"),
        (["--layer", "0", "--select", "generation", "--gen_folds", "4"], "n_train is 6"),
        (
            ["--layer", "0", "--select", "generation", "--clean_margin", "-1"],
            "--clean_margin must be",
        ),
    ],
)
def test_cli_select_generation_bad_flags(tiny_model_dir, data_dir, tmp_path, capsys, extra, needle):
    from lm_eval_robust.cli import main

    task = [] if "--layer" in extra else ["--task", "ni065_text_pert"]
    assert main([*_fit(tiny_model_dir, *extra), *task, "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lm-eval-robust: error:")
    assert needle in err[0]


def test_changed_counts_follow_the_call_order() -> None:
    from lm_eval_robust.scoring.generation.gen_score import ScoreCall, add_changed_counts

    table = [{"k": None}, {"k": 1}, {"k": 2}]
    calls = [ScoreCall(None, None, 4, 0), ScoreCall(1, 0.1, 4, 1), ScoreCall(2, 0.1, 4, 3)] * 2
    add_changed_counts(table, calls)
    assert [r["changed"] for r in table] == [0, 2, 6]
    assert [r["n_prompts"] for r in table] == [8, 8, 8]
    with pytest.raises(ValueError, match="does not match"):
        add_changed_counts(table, calls[1:] + calls[:1])
    with pytest.raises(ValueError, match="do not fill"):
        add_changed_counts(table, calls[:4])


def test_generation_kwargs_are_the_task_yamls() -> None:
    """The scorer's requests carry the generation settings the harness reads from our YAMLs."""
    import yaml

    from lm_eval_robust.requests.generation_yamls import render_gen_yamls
    from lm_eval_robust.tasks.generation.tasks import GEN_TASKS

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    files = render_gen_yamls("")
    for short, task in GEN_TASKS.items():
        rendered = yaml.load(files[f"_gen_{short}_text_pert_yaml"], Loader=Loader)
        assert generation_kwargs(task) == rendered["generation_kwargs"]
    assert generation_kwargs(get_task("xsum"), {"max_gen_toks": 5})["max_gen_toks"] == 5
