"""Perturbed generation tasks: prompts, docs and per-doc results.

Task names (the harness already has ``nq_open``, ``gsm8k`` and ``triviaqa``, which we never
shadow): ``<name>_text_pert`` (clean + perturbed prompts of the test examples), ``<name>_clean``
(clean prompts only), and ``_train`` variants of both; ``<name>`` is ``nq_open``, ``gsm8k``,
``triviaqa`` or ``xsum``. Tags: ``gen_text_pert`` and ``gen_clean`` (test variants).

Protocol (paper, Appendix F.4): ``n_examples`` = 275 examples sampled with a fixed seed, the first
``n_train`` = 100 for the train split and the rest (175) for test; ``n_perturbations`` = 100 text
perturbations per example, the first ``n_fit_perturbations`` = 30 (ids 1..30) used by the train
split (fitting) and the other 70 (ids 31..100) by the test split (evaluation). Perturbation id 0 is
the clean prompt. Few-shot demonstrations come from records outside the sample.

Prompts follow the harness's own tasks: ``Q: {question}?\\nA:`` after ``Answer these
questions:`` for NQ-open (demonstrations joined by ``\\n``), ``Question: {question}?\\nAnswer:``
for TriviaQA, ``Question: {question}\\nAnswer:`` with worked solutions and 5 shots for GSM8K, and
for XSum (not an lm-eval core task) ``Article: {document}\\nOne-sentence summary:``. The
harness's ``nq_open``/``triviaqa`` YAMLs leave ``num_fewshot`` at 0; our ``n_shots`` defaults
follow them (0, 0, 5, 0) and can be raised with ``--metadata``. The harness appends ``?`` to
every question; we do so only where the question does not already end with one (TriviaQA's do).
Text perturbations (the NI tasks' engine, seeded per example and perturbation) touch every
unprotected segment (``text_scope=all``) or the query only (``text_scope=query``); the cue
words (``Q:``, ``A:``, ``Question:``, ``Answer:``...) and the demonstrations' answers are
protected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lm_eval_robust.base.harness_names import harness
from lm_eval_robust.base.validate import check_doc_budget
from lm_eval_robust.tasks.generation.data import Record, load_records
from lm_eval_robust.tasks.generation.metrics import SCORES, metric_names, score_generation
from lm_eval_robust.tasks.perturb.rng import seeded_rng
from lm_eval_robust.tasks.perturb.segments import Segment, join
from lm_eval_robust.tasks.perturb.text import TextPerturbConfig, perturb_segments
from lm_eval_robust.tasks.settings import GenConfig, GenConfigError

__all__ = [
    "GEN_TASKS",
    "GenConfig",
    "GenTask",
    "build_docs",
    "build_prompt",
    "load_dataset",
    "process_results",
]

SPLITS = ("train", "test")
KINDS = ("clean", "text")


@dataclass(frozen=True)
class GenTask:
    """One generation task: its data, prompt pieces, stop sequences and metric."""

    name: str
    dataset: str
    description: str  # text before the demonstrations
    question_prefix: str  # protected cue before the input
    question_suffix: str  # appended to the input (unprotected, e.g. "?")
    answer_cue: str  # protected cue the model continues
    demo_join: str  # between demonstrations and before the query
    until: tuple[str, ...]
    max_gen_toks: int
    metric: str  # "em", "em_number" or "f1"
    n_shots: int


GEN_TASKS: dict[str, GenTask] = {
    t.name: t
    for t in (
        GenTask(
            "nq_open",
            "nq_open",
            "Answer these questions:\n\n",
            "Q: ",
            "?",
            "\nA:",
            "\n",
            ("\n", ".", ","),
            32,
            "em",
            0,
        ),
        GenTask(
            "triviaqa",
            "triviaqa",
            "",
            "Question: ",
            "?",
            "\nAnswer:",
            "\n\n",
            ("\n", ".", ","),
            32,
            "em",
            0,
        ),
        GenTask(
            "gsm8k",
            "gsm8k",
            "",
            "Question: ",
            "",
            "\nAnswer:",
            "\n\n",
            ("Question:", "</s>", "<|im_end|>"),
            256,
            "em_number",
            5,
        ),
        GenTask(
            "xsum",
            "xsum",
            "",
            "Article: ",
            "",
            "\nOne-sentence summary:",
            "\n\n",
            ("\n",),
            64,
            "f1",
            0,
        ),
    )
}


def get_task(name: str) -> GenTask:
    if name not in GEN_TASKS:
        raise GenConfigError(f"unknown generation task {name!r}; known: {sorted(GEN_TASKS)}")
    return GEN_TASKS[name]


@dataclass(frozen=True)
class GenData:
    task: GenTask
    demos: tuple[Record, ...]
    splits: Mapping[str, tuple[Record, ...]]


@lru_cache(maxsize=8)
def _records(dataset: str, data_dir: str | None) -> tuple[Record, ...]:
    return tuple(load_records(dataset, data_dir))


def load_gen_data(task: GenTask, config: GenConfig) -> GenData:
    """Sample ``n_examples`` records with a fixed seed, split train/test; demos from the rest."""
    records = _records(task.dataset, config.data_dir)
    n_shots = task.n_shots if config.n_shots is None else config.n_shots
    if len(records) < config.n_examples + n_shots:
        raise GenConfigError(
            f"{task.name}: {len(records)} records, fewer than n_examples={config.n_examples} + "
            f"n_shots={n_shots}; lower n_examples"
        )
    order = list(range(len(records)))
    seeded_rng("gen-examples", task.name, config.seed).shuffle(order)
    chosen = [records[i] for i in order[: config.n_examples]]
    demos = tuple(records[i] for i in order[config.n_examples : config.n_examples + n_shots])
    return GenData(
        task=task,
        demos=demos,
        splits={"train": tuple(chosen[: config.n_train]), "test": tuple(chosen[config.n_train :])},
    )


def _input_text(task: GenTask, rec: Record, config: GenConfig) -> str:
    text = rec.text
    if task.dataset == "xsum" and config.max_doc_words > 0:
        text = " ".join(text.split()[: config.max_doc_words])
    suffix = task.question_suffix
    return text if suffix and text.endswith(suffix) else text + suffix


def build_prompt(data: GenData, rec: Record, config: GenConfig) -> list[Segment]:
    """Segments of the clean prompt: description, demonstrations, then the query and its cue."""
    t = data.task
    segs: list[Segment] = []
    if t.description:
        segs.append(Segment(t.description, role="definition"))
    for demo in data.demos:
        segs.append(Segment(t.question_prefix, protected=True, role="cue"))
        segs.append(Segment(_input_text(t, demo, config), role="demo"))
        segs.append(Segment(t.answer_cue, protected=True, role="cue"))
        segs.append(Segment(" " + demo.demo_answer, protected=True, role="label"))
        segs.append(Segment(t.demo_join, protected=True, role="format"))
    segs.append(Segment(t.question_prefix, protected=True, role="cue"))
    segs.append(Segment(_input_text(t, rec, config), role="query"))
    segs.append(Segment(t.answer_cue, protected=True, role="cue"))
    return segs


def build_docs(name: str, kind: str, split: str, config: GenConfig) -> list[dict[str, Any]]:
    """All docs of one task variant, perturbation-round-major (all clean prompts first)."""
    if kind not in KINDS:
        raise GenConfigError(f"unknown kind {kind!r}; use one of {list(KINDS)}")
    if split not in SPLITS:
        raise GenConfigError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    task = get_task(name)
    data = load_gen_data(task, config)
    n_ids = len(config.pert_ids(split)) if kind == "text" else 0
    recs = data.splits[split]
    chars = len(join(build_prompt(data, recs[0], config))) if recs else 0
    check_doc_budget(f"{name}_{kind}", len(recs), n_ids + 1, chars, GenConfigError)
    ids = list(config.pert_ids(split)) if kind == "text" else []
    text_cfg = TextPerturbConfig(
        kinds=config.text_kinds, rate=config.text_rate, scope=config.text_scope
    )
    rounds: list[list[dict[str, Any]]] = [[] for _ in range(len(ids) + 1)]
    for rec in data.splits[split]:
        clean = build_prompt(data, rec, config)
        base = {
            "task": name,
            "kind": kind,
            "split": split,
            "example_id": rec.id,
            "answers": list(rec.answers),
            "target": rec.answers[0],
        }
        rounds[0].append({**base, "pert_id": 0, "pert_kind": "clean", "prompt": join(clean)})
        for r, j in enumerate(ids, start=1):
            rng = seeded_rng("gen-text", name, config.seed, rec.id, j)
            segs, pkind = perturb_segments(clean, text_cfg, rng)
            rounds[r].append({**base, "pert_id": j, "pert_kind": pkind, "prompt": join(segs)})
    return [doc for rnd in rounds for doc in rnd]


def load_dataset(**kwargs: Any) -> Any:
    """``custom_dataset`` entry point: called by the harness with metadata and dataset_kwargs."""
    import datasets

    name = kwargs.pop("lmer_gen_task")
    kind = kwargs.pop("lmer_kind")
    split = kwargs.pop("lmer_split")
    docs = build_docs(name, kind, split, GenConfig.from_metadata(kwargs))
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


def process_results(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """Per-doc scores; ids travel with them (order-free aggregation)."""
    task = get_task(str(doc["task"]))
    generation = str(results[0]) if results else ""
    scores = score_generation(task.metric, generation, list(doc["answers"]), task.until)
    item = {
        "task": doc["task"],
        "example_id": doc["example_id"],
        "pert_id": int(doc["pert_id"]),
        "scores": scores,
    }
    return {harness(m): item for m in metric_names(task.metric, doc["kind"] != "clean")}


def task_metric_names(name: str, perturbed: bool) -> tuple[str, ...]:
    return metric_names(get_task(name).metric, perturbed)


assert all(t.metric in SCORES for t in GEN_TASKS.values())
