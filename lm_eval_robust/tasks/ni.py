"""Perturbed Natural Instructions tasks: examples, prompts, docs and per-doc results.

One code path builds every prompt: an example rendered in a format, after the Definition and the
demonstrations. The clean prompt is perturbation id 0 (the task's original format, no text edit);
a format-perturbed prompt renders the same example in a sampled format; a text-perturbed prompt
applies a seeded text perturbation to the clean prompt's unprotected segments. Every random choice
is seeded from (task, seed, split, example id, perturbation id), so the same settings give
byte-identical prompts in any process.

Docs are ordered perturbation-round-major (every example's clean prompt, then every example's
first perturbation, ...), so ``--limit`` keeps whole rounds over all examples.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from lm_eval_robust.base.harness_names import NI_METRICS_CLEAN, NI_METRICS_PERT, harness
from lm_eval_robust.base.validate import check_doc_budget
from lm_eval_robust.tasks.data import load_ni_task
from lm_eval_robust.tasks.perturb.format import (
    Enumeration,
    Format,
    Node,
    Spacing,
    item_label,
    render,
    sample_formats,
    split_formats,
)
from lm_eval_robust.tasks.perturb.rng import derive_seed, seeded_rng
from lm_eval_robust.tasks.perturb.segments import Segment, join
from lm_eval_robust.tasks.perturb.text import TextPerturbConfig, perturb_segments
from lm_eval_robust.tasks.settings import NIConfig, TaskConfigError
from lm_eval_robust.tasks.specs import TaskSpec, Values, get_spec

log = logging.getLogger(__name__)

SPLITS = ("train", "test", "holdout")
KINDS = ("clean", "format", "text")
PROMPT_JOIN = "\n\n"


@dataclass(frozen=True)
class Example:
    """One parsed NI instance."""

    id: str
    values: Values
    gold: int


def _instance_output(inst: Mapping[str, Any]) -> str:
    out = inst.get("output")
    if isinstance(out, list):
        return str(out[0]) if out else ""
    return str(out)


def parse_example(spec: TaskSpec, ident: str, text: str, output: str) -> Example | None:
    values = spec.parse(text)
    if values is None:
        return None
    if spec.is_multiple_choice:
        assert spec.gold_map is not None
        gold = spec.gold_map(output)
    else:
        gold = spec.labels.index(output.strip()) if output.strip() in spec.labels else None
    if gold is None:
        return None
    return Example(id=ident, values=values, gold=gold)


@dataclass(frozen=True)
class TaskData:
    spec: TaskSpec
    definition: str
    demos: tuple[Example, ...]
    splits: Mapping[str, tuple[Example, ...]]
    n_parsed: int
    n_instances: int


def _split_sizes(n: int, fractions: Sequence[float]) -> list[int]:
    sizes = [round(n * f) for f in fractions[:-1]]
    sizes.append(n - sum(sizes))
    return sizes


def load_task_data(spec: TaskSpec, config: NIConfig) -> TaskData:
    """Parse the task file, sample examples with a fixed seed and split them 50/35/15."""
    raw = load_ni_task(spec.file, config.data_dir)
    parsed: list[Example] = []
    instances = raw["Instances"]
    for inst in instances:
        ex = parse_example(spec, str(inst.get("id")), str(inst["input"]), _instance_output(inst))
        if ex is not None:
            parsed.append(ex)
    if len(parsed) < 3:
        raise TaskConfigError(
            f"{spec.short}: only {len(parsed)} of {len(instances)} instances of {spec.file} "
            "could be parsed; the data file does not match the task's format: point data_dir at an "
            "unmodified Natural Instructions copy, or unset it to download the canonical file"
        )
    n = min(config.n_examples, len(parsed))
    if n < config.n_examples:
        log.warning(
            "%s: %d parsable instances, fewer than n_examples=%d; using all of them",
            spec.short,
            len(parsed),
            config.n_examples,
        )
    order = list(range(len(parsed)))
    seeded_rng("examples", spec.short, config.seed).shuffle(order)
    chosen = [parsed[i] for i in order[:n]]
    sizes = _split_sizes(n, config.split_fractions)
    splits: dict[str, tuple[Example, ...]] = {}
    start = 0
    for name, size in zip(SPLITS, sizes, strict=True):
        splits[name] = tuple(chosen[start : start + size])
        start += size
    demos: list[Example] = []
    for i, pos in enumerate(raw.get("Positive Examples", [])):
        if len(demos) >= config.n_shots:
            break
        ex = parse_example(spec, f"pos{i}", str(pos["input"]), str(pos["output"]))
        if ex is not None:
            demos.append(ex)
    if len(demos) < config.n_shots:
        raise TaskConfigError(
            f"{spec.short}: only {len(demos)} usable positive examples for n_shots="
            f"{config.n_shots}; lower n_shots"
        )
    definition = raw["Definition"][0] if isinstance(raw["Definition"], list) else raw["Definition"]
    return TaskData(
        spec=spec,
        definition=str(definition),
        demos=tuple(demos),
        splits=splits,
        n_parsed=len(parsed),
        n_instances=len(instances),
    )


def _find_enumeration(node: Node, key: str, counter: list[int]) -> int | None:
    if isinstance(node, Enumeration):
        idx = counter[0]
        counter[0] += 1
        return idx if node.key == key else None
    if isinstance(node, Spacing):
        for child in node.children:
            found = _find_enumeration(child, key, counter)
            if found is not None:
                return found
    return None


def option_labels(spec: TaskSpec, fmt: Format, n_options: int) -> list[str]:
    """The option labels a format gives (MC) or the task's fixed label words."""
    if not spec.is_multiple_choice:
        return list(spec.labels)
    assert spec.options_key is not None
    idx = _find_enumeration(spec.structure, spec.options_key, [0])
    if idx is None:
        raise TaskConfigError(f"{spec.short}: no enumeration named {spec.options_key!r}")
    return [item_label(fmt.enums[idx].number_format, i) for i in range(n_options)]


def _protected_split(text: str, words: Sequence[str], role: str) -> list[Segment]:
    """Split ``text`` so every occurrence of a label word is its own protected segment."""
    if not words:
        return [Segment(text, role=role)]
    pattern = "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True))
    rx = re.compile(rf"(?<![\w])({pattern})(?![\w])", re.IGNORECASE)
    out: list[Segment] = []
    pos = 0
    for m in rx.finditer(text):
        if m.start() > pos:
            out.append(Segment(text[pos : m.start()], role=role))
        out.append(Segment(m.group(0), protected=True, role="label"))
        pos = m.end()
    if pos < len(text):
        out.append(Segment(text[pos:], role=role))
    return out


def definition_segments(data: TaskData, labels: Sequence[str]) -> list[Segment]:
    spec = data.spec
    if spec.instruction is None:
        words = [*spec.labels, *spec.protect_words]
        return _protected_split(data.definition, words, "definition")
    out: list[Segment] = []
    for part in re.split(r"(\{\d+\})", spec.instruction):
        m = re.fullmatch(r"\{(\d+)\}", part)
        if m:
            out.append(Segment(labels[int(m.group(1))], protected=True, role="label"))
        elif part:
            out.append(Segment(part, role="definition"))
    return out


def _n_options(data: TaskData) -> int:
    key = data.spec.options_key
    if key is None:
        return len(data.spec.labels)
    ex = data.demos[0] if data.demos else next(e for s in data.splits.values() for e in s)
    return len(ex.values[key])


def _retag(segments: Sequence[Segment], prefix: str) -> list[Segment]:
    return [replace(s, role=f"{prefix}:{s.role}") for s in segments]


def build_prompt(data: TaskData, fmt: Format, example: Example) -> tuple[list[Segment], list[str]]:
    """Segments of the full prompt and the option/label strings for ``fmt``."""
    spec = data.spec
    labels = option_labels(spec, fmt, _n_options(data))
    segs: list[Segment] = definition_segments(data, labels)
    for demo in data.demos:
        segs.append(Segment(PROMPT_JOIN, role="format"))
        segs.extend(_retag(render(spec.structure, fmt, demo.values, labels[demo.gold]), "demo"))
    segs.append(Segment(PROMPT_JOIN, role="format"))
    segs.extend(_retag(render(spec.structure, fmt, example.values, None), "query"))
    return segs, labels


def scored_labels(spec: TaskSpec, labels: Sequence[str]) -> list[str]:
    """The continuations scored for each label (the verbalizer when the task declares one)."""
    if not spec.is_multiple_choice and spec.scored:
        return list(spec.scored)
    return list(labels)


@lru_cache(maxsize=32)
def format_splits(spec_short: str, pool: int, seed: int) -> dict[str, list[Format]]:
    """The task's sampled formats, split disjointly 50/35/15 (clean format excluded)."""
    spec = get_spec(spec_short)
    formats = sample_formats(
        spec.structure,
        pool,
        seed=derive_seed("formats", spec.short, seed),
        exclude=(spec.clean_format,),
    )
    return split_formats(formats, seed=derive_seed("format-split", spec.short, seed))


def _format_schedule(
    formats: Sequence[Format], k: int, rng_parts: tuple[object, ...]
) -> list[Format]:
    """K formats for one example: a seeded permutation of the split's pool, cycled if K > pool."""
    if not formats:
        raise TaskConfigError("no formats in this split; raise format_pool")
    order = list(range(len(formats)))
    seeded_rng(*rng_parts).shuffle(order)
    return [formats[order[i % len(order)]] for i in range(k)]


def build_docs(task: str, kind: str, split: str, config: NIConfig) -> list[dict[str, Any]]:
    """All docs of one task variant: clean prompts, then perturbation rounds."""
    if kind not in KINDS:
        raise TaskConfigError(f"unknown perturbation kind {kind!r}; use one of {list(KINDS)}")
    if split not in SPLITS:
        raise TaskConfigError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    spec = get_spec(task)
    data = load_task_data(spec, config)
    examples = data.splits[split]
    if not examples:
        raise TaskConfigError(f"{spec.short}: split {split!r} is empty; raise n_examples")
    k = 0 if kind == "clean" else config.n_perturbations
    chars = len(join(build_prompt(data, spec.clean_format, examples[0])[0]))
    check_doc_budget(f"{spec.short}_{kind}", len(examples), k + 1, chars, TaskConfigError)
    text_cfg = (
        TextPerturbConfig(kinds=config.text_kinds, rate=config.text_rate, scope=config.text_scope)
        if kind == "text"
        else None
    )
    pool = (
        format_splits(spec.short, config.format_pool, config.seed)[split]
        if kind == "format"
        else []
    )
    crossed = config.design == "crossed"
    if crossed and kind == "format" and k > len(pool):
        raise TaskConfigError(
            f"{spec.short}: design=crossed gives every example the same {k} formats, but the "
            f"{split} split has {len(pool)}; lower n_perturbations to {len(pool)} or raise "
            "format_pool"
        )
    rounds: list[list[dict[str, Any]]] = [[] for _ in range(k + 1)]
    for ex in examples:
        clean_segs, clean_labels = build_prompt(data, spec.clean_format, ex)
        base = {
            "task": spec.short,
            "kind": kind,
            "split": split,
            "prompt_style": config.prompt_style,
            "example_id": ex.id,
            "gold": ex.gold,
        }
        rounds[0].append(
            _doc(base, spec, 0, "clean", spec.clean_format.format_id, clean_segs, clean_labels)
        )
        if kind == "format":
            who: tuple[object, ...] = () if crossed else (ex.id,)
            schedule = _format_schedule(
                pool, k, ("format-schedule", spec.short, config.seed, split, *who)
            )
            for j, fmt in enumerate(schedule, start=1):
                segs, labels = build_prompt(data, fmt, ex)
                rounds[j].append(_doc(base, spec, j, "format", fmt.format_id, segs, labels))
        elif kind == "text":
            assert text_cfg is not None
            for j in range(1, k + 1):
                rng = seeded_rng("text", spec.short, config.seed, split, ex.id, j)
                cfg = text_cfg
                if crossed:  # the j-th perturbation is of the same kind for every example
                    cfg = replace(text_cfg, kinds=(text_cfg.kinds[(j - 1) % len(text_cfg.kinds)],))
                segs, pkind = perturb_segments(clean_segs, cfg, rng)
                rounds[j].append(
                    _doc(base, spec, j, pkind, spec.clean_format.format_id, segs, clean_labels)
                )
    return [doc for rnd in rounds for doc in rnd]


def _doc(
    base: Mapping[str, Any],
    spec: TaskSpec,
    pert_id: int,
    pert_kind: str,
    format_id: str,
    segments: Sequence[Segment],
    labels: Sequence[str],
) -> dict[str, Any]:
    return {
        **base,
        "pert_id": pert_id,
        "pert_kind": pert_kind,
        "format_id": format_id,
        "prompt": join(segments),
        "labels": list(labels),
        # bare: the YAML's target_delimiter " " puts the label after the answer cue in a plain
        # prompt; under --apply_chat_template the harness drops the delimiter and the label is
        # the first token of the assistant's answer
        "choices": list(scored_labels(spec, labels)),
    }


def load_dataset(**kwargs: Any) -> Any:
    """``custom_dataset`` entry point: called by the harness with metadata and dataset_kwargs."""
    import datasets

    task = kwargs.pop("lmer_task")
    kind = kwargs.pop("lmer_kind")
    split = kwargs.pop("lmer_split")
    config = NIConfig.from_metadata(kwargs)
    docs = build_docs(task, kind, split, config)
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


def process_results(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """Per-doc values for every metric: ids travel with the values (order-free aggregation)."""
    lls = [float(r[0]) for r in results]
    gold = int(doc["gold"])
    pred = max(range(len(lls)), key=lambda i: (lls[i], -i))
    others = [v for i, v in enumerate(lls) if i != gold]
    margin = lls[gold] - max(others) if others else math.inf
    item = {
        "task": doc["task"],
        "example_id": doc["example_id"],
        "pert_id": int(doc["pert_id"]),
        "gold": gold,
        "pred": pred,
        "tied": sum(v == lls[pred] for v in lls) > 1,  # scored 1/k by the metrics (ties.py)
        "margin": margin,
        "ll": lls,
        # the format (format perturbations) or text-perturbation kind of the doc: per-variant
        # accuracy and its spread (stats.robustness)
        "variant": str(doc["format_id"] if doc["kind"] == "format" else doc["pert_kind"]),
    }
    keys = _KEYS_CLEAN if doc["kind"] == "clean" else _KEYS_PERT
    return {k: item for k in keys}


#: the short names of a clean and of a perturbed task's metrics (the list is in
#: :mod:`lm_eval_robust.base.harness_names`; ``process_results`` keys them by their harness names)
METRICS_CLEAN: tuple[str, ...] = NI_METRICS_CLEAN
METRICS_PERT: tuple[str, ...] = NI_METRICS_PERT
_KEYS_CLEAN = tuple(harness(m) for m in METRICS_CLEAN)
_KEYS_PERT = tuple(harness(m) for m in METRICS_PERT)


#: content-free query texts of contextual calibration (Zhao et al. 2021)
CONTENT_FREE = ("N/A", "", "[MASK]")


def content_free_prompts(task: str, config: NIConfig) -> tuple[list[str], list[str]]:
    """Clean-format prompts whose query fields all read a content-free text, and the bare choices.

    The Definition and demonstrations are the task's own; every field and option of the query is
    replaced by one of :data:`CONTENT_FREE`.
    """
    spec = get_spec(task)
    data = load_task_data(spec, config)
    template = data.demos[0] if data.demos else data.splits["train"][0]
    prompts: list[str] = []
    choices: list[str] = []
    for text in CONTENT_FREE:
        values = {
            k: [text] * len(v) if isinstance(v, list) else text for k, v in template.values.items()
        }
        segs, labels = build_prompt(data, spec.clean_format, Example("cf", values, 0))
        prompts.append(join(segs))
        choices = list(scored_labels(spec, labels))
    return prompts, choices
