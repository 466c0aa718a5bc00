"""The harness task of a perturbed variant of any lm-eval task.

A :class:`WrappedTask` holds the stock task itself (built by lm-eval from its own config) and
asks it for everything that defines the task: docs, choices, targets, few-shot demos, request
construction and per-doc metrics. It adds only the perturbation rounds:

* its docs are the stock task's evaluation docs (all of them, or the train/test/hold-out part of
  the paper's 50/35/15 split), each once clean (``pert_id`` 0) and ``n_perturbations`` times
  perturbed, ordered round by round (every example's clean prompt first, so ``--limit`` keeps
  whole rounds);
* a clean prompt is the stock task's own rendering: the stock task renders its docs in its own
  order with its own few-shot sampler, so the demos are those a plain run of the stock task shows;
* a text-perturbed prompt applies one seeded text perturbation
  (:mod:`lm_eval_robust.tasks.perturb.text`)
  to the shown content of the clean prompt (the query by default, ``text_scope=all`` adds the
  demos), never to field descriptors, option markers, the answer choices it shows verbatim, or
  the continuations the harness scores;
* a format-perturbed prompt is rendered again by the stock task with the format's target and
  few-shot delimiters, with the same demos, and its descriptors, field breaks and option markers
  re-rendered in the format (:mod:`.parts`); formats come from disjoint train/test/hold-out sets.
  A prompt with no descriptor or option enumerator gets text perturbations instead (one warning).
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from lm_eval.api.task import ConfigurableTask

from lm_eval_robust.base.harness_names import NI_METRICS_PERT, harness, metric
from lm_eval_robust.stats import wrap_metrics
from lm_eval_robust.tasks.perturb.rng import seeded_rng
from lm_eval_robust.tasks.perturb.segments import Segment, join
from lm_eval_robust.tasks.perturb.text import TextPerturbConfig, perturb_segments
from lm_eval_robust.tasks.wrap.names import VariantName, parse
from lm_eval_robust.tasks.wrap.parts import (
    PromptFormat,
    find_parts,
    protected_spans,
    render_parts,
    sample_prompt_formats,
    split_prompt_formats,
)
from lm_eval_robust.tasks.wrap.settings import SPLIT_FRACTIONS, WrapError, WrapSettings

log = logging.getLogger(__name__)

#: key of the stock task's full config inside a wrapped task's config (set by :mod:`.resolve`)
BASE_KEY = "lmer_base_config"
SUPPORTED = ("multiple_choice", "generate_until")
_CERTIFY = {"p_cert_h", "p_cert_c", "p_cert_exact", "pop_cert_h", "pop_cert_c"}
_warned: set[str] = set()


def check_output_type(name: str, base: str, output_type: str) -> None:
    """Refuse output types the wrapper cannot perturb, in one line."""
    if output_type not in SUPPORTED:
        raise WrapError(
            f"{name}: {base} is a {output_type} task; perturbed variants exist for "
            f"{' and '.join(SUPPORTED)} tasks only (drop {name} from --tasks)"
        )


def _bac_metric_list(certificates: bool) -> list[dict[str, Any]]:
    """Our tasks' measures, under their harness names (lm_eval_robust.base.harness_names)."""
    out = []
    for name in NI_METRICS_PERT:
        if name in _CERTIFY and not certificates:
            continue
        m = metric(name)
        module, _, attr = m.aggregation_path.rpartition(".")
        out.append(
            {
                "metric": m.harness_name,
                "aggregation": getattr(importlib.import_module(module), attr),
                "higher_is_better": m.higher_is_better,
            }
        )
    return out


def wrapped_process_results(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """Placeholder in the dumped config: :meth:`WrappedTask.process_results` does the work."""
    raise WrapError("wrapped_process_results is called through WrappedTask only")


class DocList(list):
    """The expanded docs: a list (the same dict objects on every pass) with the ``features`` the
    harness reads from a dataset at start-up."""

    @property
    def features(self) -> dict[str, None]:
        return dict.fromkeys(self[0]) if self else {}


class WrappedTask(ConfigurableTask):
    """A perturbed variant of a stock task (see the module docstring)."""

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        cfg = dict(config or {})
        cfg.pop("class", None)
        if BASE_KEY not in cfg:
            raise WrapError("a wrapped task is built by name (--tasks <task>_robust_text)")
        base_cfg = dict(cfg.pop(BASE_KEY))
        name = str(cfg["task"])
        variant = parse(name)
        if variant is None:
            raise WrapError(f"{name} is not a perturbed-variant name (<task>_robust_text)")
        self.variant: VariantName = variant
        meta = {**dict(base_cfg.get("metadata") or {}), **dict(cfg.get("metadata") or {})}
        self.settings = WrapSettings.from_metadata(meta)
        output_type = str(base_cfg.get("output_type") or "generate_until")
        check_output_type(name, variant.base, output_type)
        base_cfg["metadata"] = meta
        self.base = ConfigurableTask(config=base_cfg)
        if self.base.multiple_input:
            raise WrapError(
                f"{name}: {variant.base} puts its choices in the context (multiple inputs); "
                "its prompts cannot be perturbed apart from its choices"
            )
        choice_sets: set[tuple[str, ...]] = set()
        if output_type == "multiple_choice":
            choice_sets = {
                tuple(str(c) for c in self.base.doc_to_choice(d)) for d in self.base.eval_docs
            }
        #: one label set for every doc (BAC over labels; the label corrections apply)
        self.fixed_labels = len(choice_sets) == 1
        #: the same number of choices in every doc (certificates over answer positions are valid)
        self.fixed_width = len({len(c) for c in choice_sets}) == 1
        self.stock_metrics = [
            m for m in self.base._metric_fn_list if m in self.base._aggregation_list
        ]
        metric_list: list[dict[str, Any]] = []
        for m in self.stock_metrics:
            hib = bool(self.base._higher_is_better.get(m, True))
            for stat in wrap_metrics.STOCK_STATS:
                metric_list.append(
                    {
                        "metric": wrap_metrics.stock_metric(m, stat),
                        "aggregation": wrap_metrics.stock_aggregation(stat, hib),
                        "higher_is_better": hib if stat != "spread" else False,
                    }
                )
        if output_type == "multiple_choice":
            metric_list += _bac_metric_list(certificates=self.fixed_width)
        own = {
            **base_cfg,
            "task": name,
            "metric_list": metric_list,
            "process_results": wrapped_process_results,
            "metadata": {
                **meta,
                "lmer_wrap_of": variant.base,
                "lmer_kind": variant.kind,
                "lmer_split": variant.split,
                "design": self.settings.design,
            },
        }
        for key in ("tag", "group", "task_alias"):
            own.pop(key, None)
        super().__init__(config=own)
        self._contexts: dict[tuple[Any, ...], dict[int, tuple[str, Any]]] = {}
        self._next: dict[tuple[Any, ...], int] = {}
        self._perturbed: dict[tuple[Any, ...], tuple[str, str, str]] = {}
        self._format_of: dict[tuple[int, int], PromptFormat] = {}
        wrap_metrics.install_stderr()

    # -- data: the stock task's -----------------------------------------------------------------

    def download(self, dataset_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.dataset = self.base.dataset

    @cached_property
    def stock_docs(self) -> list[Any]:
        """The stock task's evaluation docs, in its order."""
        return list(self.base.eval_docs)

    @cached_property
    def example_ids(self) -> list[int]:
        """Indices (into :attr:`stock_docs`) of this variant's examples, in the task's order."""
        n = len(self.stock_docs)
        if self.variant.split == "all":
            chosen = list(range(n))
        else:
            order = list(range(n))
            seeded_rng("wrap-examples", self.variant.base, self.settings.seed).shuffle(order)
            sizes = [round(n * f) for f in SPLIT_FRACTIONS[:-1]]
            sizes.append(n - sum(sizes))
            start = {"train": 0, "test": sizes[0], "holdout": sizes[0] + sizes[1]}
            k = ("train", "test", "holdout").index(self.variant.split)
            chosen = sorted(order[start[self.variant.split] : start[self.variant.split] + sizes[k]])
        if self.settings.n_examples and self.settings.n_examples < len(chosen):
            # a seeded sample (in the task's order): the first docs may all share one answer
            rng = seeded_rng("wrap-sample", self.variant.base, self.settings.seed)
            chosen = sorted(rng.sample(chosen, self.settings.n_examples))
        if not chosen:
            raise WrapError(
                f"{self.variant.name}: no docs in the {self.variant.split} split of "
                f"{self.variant.base} ({n} eval docs)"
            )
        return chosen

    @cached_property
    def _eval_docs(self) -> DocList:
        docs = DocList()
        for j in range(self.settings.n_perturbations + 1):
            for i in self.example_ids:
                doc = dict(self.stock_docs[i])
                doc["_lmer"] = {"example": i, "pert_id": j}
                docs.append(doc)
        return docs

    @property
    def eval_docs(self) -> DocList:
        return self._eval_docs

    def set_fewshot_seed(self, seed: int | None = None) -> None:
        super().set_fewshot_seed(seed)
        self.base.set_fewshot_seed(seed)
        self._contexts.clear()
        self._next.clear()
        self._perturbed.clear()

    # -- prompts --------------------------------------------------------------------------------

    @cached_property
    def formats(self) -> list[PromptFormat]:
        pool = sample_prompt_formats(
            self.settings.format_pool, (self.variant.base, self.settings.seed)
        )
        sets = split_prompt_formats(pool, SPLIT_FRACTIONS, (self.variant.base, self.settings.seed))
        chosen = sets[self.variant.format_split]
        if not chosen:
            raise WrapError(f"{self.variant.name}: no formats in its split; raise format_pool")
        return chosen

    def _clean(self, key: tuple[Any, ...], i: int, render: Mapping[str, Any]) -> tuple[str, Any]:
        """The stock task's prompt of stock doc ``i`` (and its sampler state before it).

        Docs are rendered in the stock order from the first, as a plain run renders them, so a
        random few-shot sampler gives each doc the demos it gives there.
        """
        done = self._contexts.setdefault(key, {})
        start = self._next.get(key, 0)
        sampler = getattr(self.base, "sampler", None)
        for k in range(start, i + 1):
            state = sampler.rnd.getstate() if sampler is not None else None
            doc = self.stock_docs[k]
            ctx = self.base.fewshot_context(doc, gen_prefix=self.base.doc_to_prefix(doc), **render)
            done[k] = (ctx, state)
        self._next[key] = max(start, i + 1)
        return done[i]

    def _rerender(self, i: int, state: Any, fmt: PromptFormat, render: Mapping[str, Any]) -> str:
        """Stock doc ``i`` rendered by the stock task with ``fmt``'s delimiters, same demos."""
        base = self.base
        sampler = getattr(base, "sampler", None)
        fs = base.fewshot_cfg
        saved = (
            base.config.target_delimiter,
            base.config.fewshot_delimiter,
            fs.target_delimiter,
            fs.fewshot_delimiter,
            sampler.rnd.getstate() if sampler is not None else None,
        )
        try:
            base.config.target_delimiter = fmt.target_delimiter
            base.config.fewshot_delimiter = fmt.fewshot_delimiter
            fs.target_delimiter = fmt.target_delimiter
            fs.fewshot_delimiter = fmt.fewshot_delimiter
            if sampler is not None and state is not None:
                sampler.rnd.setstate(state)
            doc = self.stock_docs[i]
            ctx = base.fewshot_context(doc, gen_prefix=base.doc_to_prefix(doc), **render)
        finally:
            base.config.target_delimiter, base.config.fewshot_delimiter = saved[0], saved[1]
            fs.target_delimiter, fs.fewshot_delimiter = saved[2], saved[3]
            if sampler is not None and saved[4] is not None:
                sampler.rnd.setstate(saved[4])
        return str(ctx)

    def _segments(self, ctx: str, i: int) -> list[Segment]:
        """The clean prompt as segments: demos, the query (perturbable) and protected pieces."""
        doc = self.stock_docs[i]
        query = self.base.doc_to_text(doc)
        query = query if isinstance(query, str) else ""
        qstart = ctx.rfind(query) if query else -1
        qend = qstart + len(query) if qstart >= 0 else len(ctx)
        qstart = max(qstart, 0)
        spans = protected_spans(find_parts(ctx))
        if self.OUTPUT_TYPE == "multiple_choice":
            for choice in self.base.doc_to_choice(doc):
                c = str(choice).strip()
                if len(c) < 2:
                    continue
                pos = ctx.find(c, qstart)
                while 0 <= pos < qend:
                    spans.append((pos, pos + len(c)))
                    pos = ctx.find(c, pos + len(c))
        spans.append((qend, len(ctx)))
        cuts = sorted({0, qstart, len(ctx), *(p for s in spans for p in s)})
        protected = [False] * (len(cuts) - 1)
        for a, b in spans:
            for k in range(len(cuts) - 1):
                if cuts[k] >= a and cuts[k + 1] <= b:
                    protected[k] = True
        segs = []
        for k in range(len(cuts) - 1):
            a, b = cuts[k], cuts[k + 1]
            if a == b:
                continue
            role = "demo" if b <= qstart else "query"
            segs.append(Segment(ctx[a:b], protected=protected[k], role=role))
        return segs

    def _text(self, ctx: str, i: int, j: int) -> tuple[str, str]:
        s = self.settings
        kinds = s.text_kinds
        if s.design == "crossed":  # the j-th perturbation is of the same kind for every example
            kinds = (kinds[(j - 1) % len(kinds)],)
        cfg = TextPerturbConfig(kinds=kinds, rate=s.text_rate, scope=s.text_scope)
        rng = seeded_rng("wrap-text", self.variant.base, s.seed, i, j)
        segs, kind = perturb_segments(self._segments(ctx, i), cfg, rng)
        return join(segs), kind

    def _variant_of(self, i: int, j: int, render: Mapping[str, Any]) -> tuple[str, str, str]:
        """(prompt, target delimiter, variant label) of example ``i``, perturbation ``j``."""
        key = (i, j, *sorted((k, repr(v)) for k, v in render.items()))
        hit = self._perturbed.get(key)
        if hit is not None:
            return hit
        ctx, state = self._clean(self._render_key(render), i, render)
        delim = str(self.base.config.target_delimiter)
        out: tuple[str, str, str] | None
        if j == 0:
            out = (ctx, delim, "clean")
        elif self.variant.kind == "format" and find_parts(ctx).found:
            formats = self.formats
            order = list(range(len(formats)))
            who: tuple[int, ...] = () if self.settings.design == "crossed" else (i,)
            seeded_rng("wrap-format-schedule", self.variant.base, self.settings.seed, *who).shuffle(
                order
            )
            out = None
            for step in range(len(order)):
                fmt = formats[order[(j - 1 + step) % len(order)]]
                prompt = render_parts(self._rerender(i, state, fmt, render), fmt)
                if prompt != ctx or fmt.target_delimiter != delim:
                    out = (prompt, fmt.target_delimiter, fmt.format_id)
                    self._format_of[(i, j)] = fmt
                    break
            if out is None:
                text, kind = self._text(ctx, i, j)
                out = (text, delim, kind)
        else:
            if self.variant.kind == "format" and self.variant.name not in _warned:
                _warned.add(self.variant.name)
                log.warning(
                    "%s: no field descriptor or option enumerator found in the rendered prompt "
                    "of %s; its perturbed prompts are text perturbations only",
                    self.variant.name,
                    self.variant.base,
                )
            text, kind = self._text(ctx, i, j)
            out = (text, delim, kind)
        assert out is not None
        self._perturbed[key] = out
        return out

    @staticmethod
    def _render_key(render: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(
            sorted(
                (k, repr(v) if k != "chat_template" else v is not None) for k, v in render.items()
            )
        )

    def fewshot_context(
        self,
        doc: dict[str, Any],
        num_fewshot: int,
        system_instruction: str | None = None,
        apply_chat_template: bool = False,
        fewshot_as_multiturn: bool = False,
        chat_template: Any = None,
        gen_prefix: str | None = None,
    ) -> str:
        render = {
            "num_fewshot": num_fewshot,
            "system_instruction": system_instruction,
            "apply_chat_template": apply_chat_template,
            "fewshot_as_multiturn": fewshot_as_multiturn,
            "chat_template": chat_template,
        }
        i, j = int(doc["_lmer"]["example"]), int(doc["_lmer"]["pert_id"])
        prompt, delim, variant = self._variant_of(i, j, render)
        doc["_lmer"]["target_delimiter"] = delim
        doc["_lmer"]["variant"] = variant
        return prompt

    def doc_to_prefix(self, doc: Any) -> Any:
        return self.base.doc_to_prefix(doc)

    def construct_requests(self, doc: dict[str, Any], ctx: Any, **kwargs: Any) -> Any:
        delim = doc.get("_lmer", {}).get("target_delimiter", self.base.config.target_delimiter)
        saved = self.base.config.target_delimiter
        try:
            self.base.config.target_delimiter = delim
            requests = self.base.construct_requests(doc=doc, ctx=ctx, **kwargs)
        finally:
            self.base.config.target_delimiter = saved
        lmer = doc.get("_lmer", {})
        fmt = self._format_of.get((int(lmer.get("example", -1)), int(lmer.get("pert_id", -1))))
        if fmt is not None and self.OUTPUT_TYPE == "generate_until":
            # a stop string that is a field descriptor ("Question:") stops at its re-rendering too
            gen_kwargs = requests.arguments[1]
            until = list(gen_kwargs.get("until") or [])
            for stop in list(until):
                if find_parts(stop).descriptors:
                    new = render_parts(stop, fmt).strip()
                    if new and new not in until:
                        until.append(new)
            gen_kwargs["until"] = until
        return requests

    # -- results --------------------------------------------------------------------------------

    def _gold(self, doc: Mapping[str, Any], choices: Sequence[str]) -> int:
        target = self.base.doc_to_target(doc)
        if isinstance(target, list):
            target = target[0]
        if isinstance(target, str):
            return choices.index(target) if target in choices else int(target)
        return int(target)

    def process_results(self, doc: dict[str, Any], results: Any) -> dict[str, Any]:
        lmer = doc["_lmer"]
        common = {
            "task": self.config.task,
            "example_id": str(lmer["example"]),
            "pert_id": int(lmer["pert_id"]),
            "variant": str(lmer.get("variant", "clean")),
        }
        out: dict[str, Any] = {}
        stock = self.base.process_results(doc, results)
        for m in self.stock_metrics:
            value = stock.get(m)
            if isinstance(value, bool | int | float) and not isinstance(value, complex):
                item = {**common, "value": float(value)}
                for stat in wrap_metrics.STOCK_STATS:
                    out[wrap_metrics.stock_metric(m, stat)] = item
        if self.OUTPUT_TYPE == "multiple_choice":
            choices = [str(c) for c in self.base.doc_to_choice(doc)]
            lls = [float(r[0]) for r in results[: len(choices)]]
            gold = self._gold(doc, choices)
            pred = max(range(len(lls)), key=lambda k: (lls[k], -k))
            others = [v for k, v in enumerate(lls) if k != gold]
            item = {
                **common,
                "gold": gold,
                "pred": pred,
                "tied": sum(v == lls[pred] for v in lls) > 1,
                "margin": lls[gold] - max(others) if others else math.inf,
                "ll": lls,
            }
            for name in NI_METRICS_PERT:
                if harness(name) in self._metric_fn_list:
                    out[harness(name)] = item
        return out

    def dump_config(self) -> dict[str, Any]:
        config: dict[str, Any] = dict(super().dump_config())
        config["wrapped_task"] = {
            "task": self.variant.base,
            "kind": self.variant.kind,
            "split": self.variant.split,
            "n_examples": len(self.example_ids),
            "n_perturbations": self.settings.n_perturbations,
            "label_set": "fixed" if self.fixed_labels else "per-doc",
        }
        return config
