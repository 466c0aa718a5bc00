"""Task construction on the real NI subsets: parsing, splits, prompts, protection, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.tasks.data import DataError
from lm_eval_robust.tasks.ni import NIConfig, TaskConfigError, build_docs, load_task_data
from lm_eval_robust.tasks.specs import TASK_ORDER, get_spec


@pytest.fixture(scope="module")
def cfg(data_dir: Path) -> NIConfig:
    return NIConfig(n_perturbations=3, data_dir=str(data_dir))


@pytest.mark.parametrize("task", TASK_ORDER)
def test_every_task_parses_200_examples(task: str, cfg: NIConfig) -> None:
    data = load_task_data(get_spec(task), cfg)
    sizes = {k: len(v) for k, v in data.splits.items()}
    assert sizes == {"train": 100, "test": 70, "holdout": 30}
    ids = [e.id for s in data.splits.values() for e in s]
    assert len(set(ids)) == 200  # splits are disjoint by example
    assert len(data.demos) == cfg.n_shots


@pytest.mark.parametrize("task", TASK_ORDER)
def test_docs_shape_and_labels(task: str, cfg: NIConfig) -> None:
    for kind in ("format", "text"):
        docs = build_docs(task, kind, "test", cfg)
        assert len(docs) == 70 * (cfg.n_perturbations + 1)
        # round-major order: first all clean prompts
        assert [d["pert_id"] for d in docs[:70]] == [0] * 70
        for d in docs:
            assert 0 <= d["gold"] < len(d["choices"]) == len(d["labels"])
            assert len(set(d["choices"])) == len(d["choices"])
            assert all(c == c.strip() and c for c in d["choices"])  # bare: the YAML adds " "
            # the query ends with the answer cue, right before the scored label
            assert not d["prompt"].endswith((" ", "\n", "\t"))
            if get_spec(task).is_multiple_choice:  # the instruction names every option label
                for label in d["labels"]:
                    assert label in d["prompt"]


def test_clean_prompts_shared_between_kinds(cfg: NIConfig) -> None:
    fmt = [d for d in build_docs("ni065", "format", "test", cfg) if d["pert_id"] == 0]
    txt = [d for d in build_docs("ni065", "text", "test", cfg) if d["pert_id"] == 0]
    clean = build_docs("ni065", "clean", "test", cfg)
    assert [d["prompt"] for d in fmt] == [d["prompt"] for d in txt] == [d["prompt"] for d in clean]


def test_format_splits_are_disjoint(cfg: NIConfig) -> None:
    used = {}
    for split in ("train", "test", "holdout"):
        docs = build_docs("ni1286", "format", split, cfg)
        used[split] = {d["format_id"] for d in docs if d["pert_id"] > 0}
        assert used[split]
    assert not used["train"] & used["test"]
    assert not used["train"] & used["holdout"]
    assert not used["test"] & used["holdout"]


def test_text_perturbation_keeps_labels_and_cue(cfg: NIConfig) -> None:
    docs = build_docs("ni322", "text", "test", cfg)
    clean = {d["example_id"]: d for d in docs if d["pert_id"] == 0}
    changed = 0
    for d in docs:
        if d["pert_id"] == 0:
            continue
        c = clean[d["example_id"]]
        changed += d["prompt"] != c["prompt"]
        assert d["prompt"].endswith("Answer:")
        assert d["prompt"].count("Answer: Threat") == c["prompt"].count("Answer: Threat")
        assert d["prompt"].count("Answer: Non-threat") == c["prompt"].count("Answer: Non-threat")
        assert d["choices"] == c["choices"] and d["gold"] == c["gold"]
    assert changed == len(docs) - len(clean)


def test_query_scope_leaves_definition_and_demos(data_dir: Path) -> None:
    cfg = NIConfig(n_perturbations=3, data_dir=str(data_dir), text_scope="query")
    docs = build_docs("ni280", "text", "test", cfg)
    clean = {d["example_id"]: d["prompt"] for d in docs if d["pert_id"] == 0}
    for d in docs:
        if d["pert_id"]:
            head_clean = clean[d["example_id"]].rsplit("\n\n", 1)[0]
            assert d["prompt"].rsplit("\n\n", 1)[0] == head_clean
            assert d["prompt"] != clean[d["example_id"]]


def test_multiple_choice_gold_follows_renumbering(cfg: NIConfig) -> None:
    docs = build_docs("ni1297", "format", "test", cfg)
    by_ex: dict[str, set[int]] = {}
    for d in docs:
        by_ex.setdefault(d["example_id"], set()).add(d["gold"])
        assert len(d["labels"]) == 8
    assert all(len(g) == 1 for g in by_ex.values())  # same option index in every format


@pytest.mark.parametrize(
    ("md", "match"),
    [
        ({"n_perturbations": 0}, "n_perturbations must be an integer >= 1"),
        ({"n_perturbations": -3}, "n_perturbations must be an integer >= 1"),
        ({"n_perturbations": 2.5}, "n_perturbations must be an integer"),
        ({"n_perturbations": "many"}, "n_perturbations must be an integer"),
        ({"text_kinds": "zero_width,emoji"}, "unknown text perturbation kind"),
        ({"text_rate": "fast"}, "text_rate must be a number"),
    ],
)
def test_bad_settings_are_one_line_errors(md: dict, match: str) -> None:
    with pytest.raises(TaskConfigError, match=match) as info:
        NIConfig.from_metadata(md)
    assert "\n" not in str(info.value)


def test_unknown_task_kind_split(cfg: NIConfig) -> None:
    with pytest.raises(ValueError, match="unknown task 'ni999'"):
        build_docs("ni999", "format", "test", cfg)
    with pytest.raises(TaskConfigError, match="unknown perturbation kind"):
        build_docs("ni065", "emoji", "test", cfg)
    with pytest.raises(TaskConfigError, match="unknown split"):
        build_docs("ni065", "format", "dev", cfg)


def test_missing_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    cfg = NIConfig(n_perturbations=1, data_dir=str(tmp_path / "nope"))
    with pytest.raises(DataError, match="does not exist; pass an existing folder"):
        build_docs("ni065", "format", "test", cfg)
    cfg = NIConfig(n_perturbations=1, data_dir=str(tmp_path))
    with pytest.raises(DataError, match=r"task file task065_.*not found"):
        build_docs("ni065", "format", "test", cfg)


def test_corrupt_data_file(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "task280_stereoset_classification_stereotype_type.json").write_text("{")
    cfg = NIConfig(n_perturbations=1, data_dir=str(tmp_path))
    with pytest.raises(DataError, match="not valid JSON"):
        build_docs("ni280", "format", "test", cfg)


def test_yamls_in_sync_with_generator() -> None:
    from lm_eval_robust.harness._plugin import task_dir
    from lm_eval_robust.requests.ni_yamls import render_yamls

    here = Path(task_dir())
    expected = render_yamls()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in here.iterdir() if "yaml" in p.name}
    assert on_disk == expected, "run: python -m lm_eval_robust.requests.ni_yamls task_yamls"


def test_data_dir_from_metadata_names_its_source(tmp_path: Path) -> None:
    from lm_eval_robust.tasks.data import resolve_data_dir

    with pytest.raises(UserError, match="from --metadata data_dir does not exist"):
        resolve_data_dir(str(tmp_path / "absent"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is not a folder"):
        resolve_data_dir(str(tmp_path / "file"))
