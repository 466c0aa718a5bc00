"""``debiased_hf``: the harness's HF model, with last-position logits and debiasing corrections.

Without a correction it returns the log-likelihoods of ``--model hf`` for the same requests, but
for short continuations (first-token classification: every label of our tasks) it runs the LM
head on the continuation's positions only, instead of on every position: with a 262k vocabulary
the full ``[batch, seq, vocab]`` logits tensor is most of the cost. A forward pre-hook on the
output layer gathers each row's last position before the head multiplies, so the model's own
forward (and any logit soft-capping after the head) runs unchanged; the same hook hands us the
head's input, the last hidden state ``x`` used by the corrections and by feature collection.
Requests with longer continuations, ``loglikelihood_rolling`` and generation take the parent
class's path.

Pieces the class uses live apart: the float32 label scorer
(:mod:`lm_eval_robust.scoring.label_scores`), feature collection and its file
(:mod:`lm_eval_robust.scoring.feature_collector`, :mod:`lm_eval_robust.scoring.feature_shards`), the
CPU dtype default (:mod:`lm_eval_robust.scoring.cpu_dtype`). What remains is one concept over 500
lines: the harness model class, whose request paths (last positions, prefix cache, per-task
corrections and LoRA adapters, generation with layer corrections) share its state and are overridden
from ``HFLM`` together.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from tqdm import tqdm

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.base.offline_models import load_failure_message, resolve_pretrained
from lm_eval_robust.base.validate import check_debiased_hf_args, parse_bool
from lm_eval_robust.scoring.cpu_dtype import cpu_dtype_default
from lm_eval_robust.scoring.feature_collector import FeatureCollector
from lm_eval_robust.scoring.heads import LabelTokenError, check_label_tokens, last_positions_head
from lm_eval_robust.scoring.label_scores import LABEL_SCORE_DTYPE, Float32LabelScorer
from lm_eval_robust.scoring.prefix_cache import PrefixCache, inference_context
from lm_eval_robust.tasks.data import check_data_dir_env

log = logging.getLogger(__name__)


@contextmanager
def corrected_head(model: torch.nn.Module, correction: Any) -> Iterator[None]:
    """Subtract ``psi(x) W + beta`` from the label-token logits of every head call (a hook)."""
    from lm_eval_robust.scoring.debias import apply_correction

    head = model.get_output_embeddings()  # type: ignore[operator]
    ids = torch.tensor(correction.label_token_ids, dtype=torch.long)

    def fix(_module: torch.nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
        idx = ids.to(out.device)
        out = out.clone()
        out[..., idx] = apply_correction(correction, args[0], out[..., idx]).to(out.dtype)
        return out

    handle = head.register_forward_hook(fix)
    try:
        yield
    finally:
        handle.remove()


@dataclass
class _Row:
    """One forward row: the input, and every request (and doc) it answers."""

    inp: tuple[int, ...]
    key: str | None  # correction key (task family) or None
    adapter: str | None = None  # LoRA adapter key (task family) or None
    requests: list[tuple[int, list[int]]] = field(default_factory=list)  # (request index, cont)
    docs: dict[tuple[str, int], dict[int, int]] = field(default_factory=dict)  # doc -> idx: tok


def _n_prompts(row: _Row) -> int:
    """Prompts a row answers: its docs (one prompt each), or its requests for other tasks."""
    return len(row.docs) or len({i for i, _ in row.requests})


def _positive_int_or_none(value: Any, name: str) -> int | None:
    if value is None or str(value).strip().lower() in ("", "auto", "none"):
        return None
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"{name}={value!r} is not a positive whole number; give e.g. {name}=16")
    return int(text)


@register_model("debiased_hf")
class DebiasedHFLM(HFLM):
    """HFLM with a last-positions fast path, debiasing corrections and feature collection.

    Extra model args:

    * ``pretrained`` also accepts the offline aliases of :mod:`lm_eval_robust.base.offline_models`
      (``gemma-3-270m``, the default);
    * ``correction=PATH``: a correction file, or a directory of per-task correction files, written
      by ``lm-eval-robust fit``; each request of one of our tasks gets its own task's correction
      ``M*(x) = M(x) - (psi(x) W + beta)`` on the label logits;
    * ``layer_correction=PATH``: an intermediate-layer correction file (or a directory of
      per-task files) from ``lm-eval-robust fit --layer L``, applied during generation through a
      hook on its layer (:mod:`lm_eval_robust.tasks.generation`);
      ``layer_positions=prompt|generated| all`` overrides the decode positions it edits;
    * ``collect_features=DIR``: record, for every prompt of our tasks, the head's input ``x`` at
      the label position and the label logits, into ``DIR/<task>/rank<r>.safetensors``;
    * ``lora=PATH``: a LoRA adapter file, or a directory of per-task adapter files, written by
      ``lm-eval-robust lora`` (:mod:`lm_eval_robust.scoring.lora`); each of our tasks' prompts runs
      with its task's adapter, and features and corrections record that adapter in their
      fingerprint.
    """

    def __init__(
        self,
        pretrained: Any = "gemma-3-270m",
        correction: str | None = None,
        collect_features: str | None = None,
        prefix_cache: bool | str = "auto",
        layer_correction: str | None = None,
        layer_positions: str | None = None,
        lora: str | None = None,
        fast_batch_size: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(pretrained, str):
            pretrained = resolve_pretrained(pretrained)
        paths = {"correction": correction, "layer_correction": layer_correction, "lora": lora}
        check_debiased_hf_args(pretrained, prefix_cache, paths, kwargs)
        self._setting_paths = {k: v for k, v in paths.items() if v}
        check_data_dir_env()  # the tasks read it only after the model has loaded
        self._collector: FeatureCollector | None = None  # checked before the model loads
        if collect_features:
            inputs = [("model folder", pretrained), *self._setting_paths.items()]
            self._collector = FeatureCollector(collect_features, inputs)
        self._dtype_note = ""
        if isinstance(pretrained, str):
            chosen = cpu_dtype_default(pretrained, kwargs)
            if chosen is not None:
                kwargs["dtype"] = chosen
                self._dtype_note = f"{chosen} (dtype=auto on a CPU without native half precision)"
                log.warning(
                    "debiased_hf: dtype=auto -> %s: this CPU has no native bfloat16 instructions, "
                    "so half precision is emulated and slower than float32; pass "
                    "dtype=bfloat16 to keep the checkpoint's dtype",
                    chosen,
                )
        self._fast_batch_setting = _positive_int_or_none(fast_batch_size, "fast_batch_size")
        if isinstance(pretrained, str) and "tokenizer" not in kwargs:
            kwargs["tokenizer"] = pretrained
        try:
            super().__init__(pretrained=pretrained, **kwargs)
        except OSError as exc:  # transformers' many-line "cannot load / cannot reach the hub"
            raise UserError(load_failure_message(str(pretrained), exc)) from None
        self._enable_cpu_data_parallel()
        self._fingerprint: dict[str, Any] | None = None
        self._adapters: dict[str, Any] = {}
        if lora:
            from lm_eval_robust.scoring.lora import check_adapter, load_adapters

            self._adapters = load_adapters(lora)
            for adapter in self._adapters.values():
                check_adapter(adapter, self.model, self.tokenizer)
        self._corrections: dict[str, Any] = {}
        if correction:
            from lm_eval_robust.scoring.correction import load_corrections

            head = self.model.get_output_embeddings().weight
            self._corrections = load_corrections(correction, self.fingerprint_for, head)
        self._layer_corrections: dict[str, Any] = {}
        self._layer_positions = layer_positions or None
        if layer_correction:
            from lm_eval_robust.scoring.generation.fit import load_layer_corrections
            from lm_eval_robust.scoring.generation.layers import POSITIONS

            if self._layer_positions not in (None, *POSITIONS):
                raise UserError(
                    f"layer_positions={layer_positions!r} is not one of {', '.join(POSITIONS)}; "
                    "drop it to use the correction's own setting"
                )
            self._layer_corrections = load_layer_corrections(
                layer_correction, self.fingerprint, self.model
            )
        self._label_scorer = Float32LabelScorer(self.model)
        self._prefix_cache: PrefixCache | None = None
        if self._use_prefix_cache(prefix_cache) and self.backend == "causal":
            self._prefix_cache = PrefixCache(
                self.model,
                model_call=self._model_call,
                context=inference_context(self.device.type, self.mixed_precision_dtype),
                max_cached_prefixes=8,
            )

    def _use_prefix_cache(self, setting: bool | str) -> bool:
        """``auto``: on in every dtype. In float32 cached and plain log-likelihoods agree to 1e-4;
        in half precision the cached path moves scores no further than the stock ``--model hf``
        moves its own between batch sizes (``benchmarks/bench_envelope.py``,
        ``results/benchmarks.md``, "Envelope"). ``prefix_cache=false`` turns it off."""
        if str(setting).strip().lower() != "auto":
            return parse_bool(setting, "prefix_cache")
        log.info(
            "debiased_hf: prefix_cache=auto -> on (model dtype %s)",
            getattr(self.model, "dtype", None),
        )
        return True

    def set_cache_hook(self, cache_hook: Any) -> None:
        """``--use_cache``: entries keyed by every setting that changes a score, and refused
        with ``collect_features=`` (:func:`lm_eval_robust.scoring.cache_keys.key_model_cache`)."""
        if getattr(cache_hook, "dbdict", None) is not None:
            from lm_eval_robust.scoring.cache_keys import key_model_cache

            key_model_cache(self, cache_hook.dbdict, getattr(self, "_collector", None) is not None)
        super().set_cache_hook(cache_hook)

    def get_model_info(self) -> dict[str, Any]:
        """The parent's model info plus the precision of the label scores (the report refuses to
        pair runs whose label scores differ in precision). ``model_dtype`` is spelled as ``hf``
        writes it (``torch.float32``)."""
        info = dict(super().get_model_info())
        info["label_score_dtype"] = LABEL_SCORE_DTYPE
        info["model_dtype"] = str(getattr(self.model, "dtype", ""))
        if self._dtype_note:
            info["model_dtype_note"] = self._dtype_note
        return info

    def _enable_cpu_data_parallel(self) -> None:
        """Split docs across ``accelerate launch --cpu`` processes.

        The parent class turns data parallel on only when it counts more than one GPU; on CPU
        every process would then score every doc. Under a multi-process launch each process
        takes its rank's share instead, and the harness gathers per-doc values on rank 0.
        """
        acc = getattr(self, "accelerator", None)
        if acc is not None and acc.num_processes > 1 and self.world_size == 1:
            setattr(self, "_rank", int(acc.process_index))  # noqa: B010 (parent's private slots)
            setattr(self, "_world_size", int(acc.num_processes))  # noqa: B010

    @property
    def fingerprint(self) -> dict[str, Any]:
        if self._fingerprint is None:
            from lm_eval_robust.scoring.fingerprint import model_fingerprint

            fp = model_fingerprint(self.model, self.tokenizer)
            shas = sorted(a.sha256 for a in self._adapters.values())
            # one adapter: the model is base + it; several (per task): no single identity, so
            # a correction made from this fingerprint matches only the same set of adapters
            fp["adapter_sha256"] = (
                None if not shas else shas[0] if len(shas) == 1 else "set:" + ",".join(shas)
            )
            self._fingerprint = fp
        return self._fingerprint

    def fingerprint_for(self, task: str) -> dict[str, Any]:
        """The fingerprint of the model that scores ``task``: with its LoRA adapter, if any."""
        if not self._adapters:
            return self.fingerprint
        from lm_eval_robust.scoring.correction import correction_key

        adapter = self._adapters.get(correction_key(task))
        return {**self.fingerprint, "adapter_sha256": adapter.sha256 if adapter else None}

    def _adapter_key(self, req: Any) -> str | None:
        if not self._adapters:
            return None
        from lm_eval_robust.scoring.correction import correction_key
        from lm_eval_robust.scoring.lora import LoraError

        key = correction_key(str(req.task_name))
        if not _is_ours(req) or key not in self._adapters:
            raise LoraError(
                f"no LoRA adapter for task {req.task_name!r} (have: {sorted(self._adapters)}); "
                f"train one with `lm-eval-robust lora --task {key}` or drop lora="
            )
        return key

    def _refuse_lora(self, what: str) -> None:
        if self._adapters:
            from lm_eval_robust.scoring.lora import LoraError

            raise LoraError(
                f"lora= applies to the label scoring of this package's tasks, not to {what}; "
                "drop lora="
            )

    @contextmanager
    def _adapter_attached(self, key: str | None) -> Iterator[None]:
        """Run under task ``key``'s adapter (none for None); prefix caches never cross adapters."""
        if key is None:
            yield
            return
        if self._prefix_cache is not None:
            self._prefix_cache.clear()
        try:
            with self._adapters[key].attached(self.model):
                yield
        finally:
            if self._prefix_cache is not None:
                self._prefix_cache.clear()

    # ------------------------------------------------------------------ log-likelihood
    #: our own tasks' label continuations up to this many tokens take the last-positions path
    #: (a correction acts on a label's last token; longer labels are refused with a correction)
    max_fast_tokens: int = 4
    #: any other task's continuations up to this many tokens take it too: a multiple-choice
    #: task's answers (BIG-bench's dates, names and sentences) are scored at their own positions
    #: and, through the prefix cache, share one forward of the question they continue
    max_scored_tokens: int = 32

    def loglikelihood(
        self, requests: list[Any], disable_tqdm: bool = False
    ) -> list[tuple[float, bool]]:
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        rows: dict[tuple[str | None, str | None, tuple[int, ...]], _Row] = {}
        slow: list[int] = []
        ours: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(dict)
        cut: dict[str, list[int]] = defaultdict(list)  # tokens of prompts past max_length
        cut_other: dict[str, list[int]] = defaultdict(list)  # the same, of other tasks
        for i, req in enumerate(requests):
            context, continuation = req.args
            if not context or self.backend != "causal":
                slow.append(i)
                continue
            ctx_enc, cont_enc = self._encode_pair(context, continuation)
            mine = _is_ours(req)
            adapter = self._adapter_key(req)
            style = self._prompt_style(req, context) if mine else "plain"
            if mine:
                ours[(str(req.task_name), int(req.doc_id))][continuation] = cont_enc
            n_tokens = len(ctx_enc) + len(cont_enc) - 1
            if n_tokens > self.max_length:
                # ours and wrapped tasks are refused; another task is scored on its last
                # max_length tokens as --model hf scores it, and counted in a warning
                refused = mine or _is_wrapped(req)
                (cut if refused else cut_other)[str(req.task_name)].append(n_tokens)
            limit = self.max_fast_tokens if mine else self.max_scored_tokens
            if not 1 <= len(cont_enc) <= limit:
                slow.append(i)
                continue
            # the harness's input window: the last max_length tokens of ctx+cont[:-1]
            inp = tuple((ctx_enc + cont_enc)[-(self.max_length + 1) :][:-1])
            key = self._correction_key(req) if mine else None
            row = rows.setdefault((key, adapter, inp), _Row(inp=inp, key=key, adapter=adapter))
            row.requests.append((i, cont_enc))
            if mine:
                row.docs.setdefault((str(req.task_name), int(req.doc_id)), {})[int(req.idx)] = (
                    cont_enc[-1]
                )
                if self._collector is not None:
                    self._collector.note_doc(str(req.task_name), int(req.doc_id), req.doc, style)
                if key is not None:
                    self._check_correction_style(key, style)
        if cut:
            raise TruncationError(_truncation_message(cut, len(requests), self.max_length))
        if cut_other and self.rank == 0:
            log.warning("lm-eval-robust: %s", _truncation_warning(cut_other, self.max_length))
        for (task, _doc), labels in sorted(ours.items()):
            check_label_tokens(task, labels)
        if slow:
            if any(_is_ours(requests[i]) for i in slow) and (
                self._corrections or self._collector or self._adapters
            ):
                raise LabelTokenError(
                    "corrections and feature collection need label continuations of at most "
                    f"{self.max_fast_tokens} tokens"
                )
            slow_res = super().loglikelihood([requests[i] for i in slow], disable_tqdm=disable_tqdm)
            for i, r in zip(slow, slow_res, strict=True):
                results[i] = r
        if rows:
            for i, r in self._last_positions_loglikelihood(list(rows.values()), disable_tqdm):
                results[i] = r
                # feed the harness's --use_cache database as results arrive, so a killed run
                # restarted with the same --use_cache recomputes only what was not finished
                self.cache_hook.add_partial("loglikelihood", requests[i].args, r)
            if self._prefix_cache is not None and self.rank == 0:
                s = self._prefix_cache.stats
                log.warning(
                    "debiased_hf prefix cache: %d rows from %d prefix groups, %d plain; %d prefix "
                    "tokens not recomputed; peak cache %.1f MB%s",
                    s.n_cached_rows,
                    s.n_groups,
                    s.n_fallback,
                    s.prefix_tokens_saved,
                    s.peak_cache_bytes / 2**20,
                    f"; disabled: {s.disabled_reason}" if s.disabled_reason else "",
                )
        if self._collector is not None:
            head = self.model.get_output_embeddings()
            self._collector.write(self.rank, self.fingerprint_for, head.weight)
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise PromptStyleError(
                f"{self.pretrained!s} has no chat template; drop --apply_chat_template (the "
                "plain prompt style) or use an instruct model"
            )
        return str(super().apply_chat_template(chat_history, add_generation_prompt))

    @staticmethod
    def _prompt_style(req: Any, context: str) -> str:
        """``plain`` when the harness sent the doc's prompt as is, else ``chat`` (templated).

        A doc whose task pins ``prompt_style`` to the other style is refused.
        """
        doc = req.doc
        style = "plain" if context == doc["prompt"] else "chat"
        want = str(doc.get("prompt_style", "auto"))
        if want in ("plain", "chat") and want != style:
            fix = (
                "add --apply_chat_template"
                if want == "chat"
                else "drop --apply_chat_template and --system_instruction"
            )
            raise PromptStyleError(
                f"task {req.task_name} sets prompt_style={want} but its prompts are in the {style} "
                f"style; {fix}, or set --metadata prompt_style=auto"
            )
        return style

    def _check_correction_style(self, key: str, style: str) -> None:
        fitted = self._corrections[key].stats.get("prompt_style")
        if fitted is not None and fitted != style:
            from lm_eval_robust.scoring.correction import CorrectionError

            raise CorrectionError(
                f"correction for {key!r} was fitted on {fitted}-style prompts but this run's are "
                f"{style}-style; refit it on {style} prompts or "
                f"{'add' if fitted == 'chat' else 'drop'} --apply_chat_template"
            )

    def _correction_key(self, req: Any) -> str | None:
        if not self._corrections:
            return None
        from lm_eval_robust.scoring.correction import correction_key

        key = correction_key(str(req.task_name))
        if key not in self._corrections:
            from lm_eval_robust.scoring.correction import CorrectionError

            raise CorrectionError(
                f"no correction for task {req.task_name!r} (have: {sorted(self._corrections)}); "
                f"fit one with `lm-eval-robust fit --task {key}` or drop correction="
            )
        return key

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        self._refuse_lora("rolling log-likelihoods")
        return list(super().loglikelihood_rolling(requests, disable_tqdm=disable_tqdm))

    # ------------------------------------------------------------------ generation
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Generation; with ``layer_correction=``, each task's requests run under its task's
        intermediate-layer correction (a hook on the fitted layer, removed after the group)."""
        self._refuse_lora("generation")
        self._refuse_cut_contexts(requests)
        if not self._layer_corrections:
            return list(super().generate_until(requests, disable_tqdm=disable_tqdm))
        from lm_eval_robust.scoring.correction import CorrectionError, correction_key
        from lm_eval_robust.scoring.generation.fit import apply_layer_correction

        groups: dict[str, list[int]] = defaultdict(list)
        for i, req in enumerate(requests):
            key = correction_key(str(req.task_name))
            if key not in self._layer_corrections:
                raise CorrectionError(
                    f"no layer correction for task {req.task_name!r} (have: "
                    f"{sorted(self._layer_corrections)}); fit one with `lm-eval-robust fit "
                    f"--task {key} --layer L` or drop layer_correction="
                )
            groups[key].append(i)
        out: list[str] = [""] * len(requests)
        for key, idx in sorted(groups.items()):
            corr = self._layer_corrections[key]
            with apply_layer_correction(self.model, corr, self._layer_positions):
                res = super().generate_until([requests[i] for i in idx], disable_tqdm=disable_tqdm)
            for i, r in zip(idx, res, strict=True):
                out[i] = r
        return out

    def _refuse_cut_contexts(self, requests: list[Any]) -> None:
        """The harness keeps the last ``max_length - max_gen_toks`` tokens of a context: a
        prompt of our tasks longer than that is refused, not answered from its cut tail."""
        cut: dict[str, list[int]] = defaultdict(list)
        window = 0
        for req in requests:
            doc = getattr(req, "doc", None)
            if not isinstance(doc, dict) or "pert_id" not in doc:
                continue
            context, gen_kwargs = req.args
            new = int((gen_kwargs or {}).get("max_gen_toks") or self.max_gen_toks)
            window = self.max_length - new
            n = len(self.tok_encode(context))
            if n > window:
                cut[str(req.task_name)].append(n)
        if cut:
            raise TruncationError(
                _truncation_message(cut, len(requests), window).replace(
                    "max_length=", "max_length - max_gen_toks="
                )
            )

    @contextmanager
    def using_layer_corrections(self, corrections: Mapping[str, Any]) -> Iterator[None]:
        """For a block, generate with ``corrections`` (task key -> layer correction) in place of
        the loaded ``layer_correction=`` ones; an empty mapping generates without any. The same
        :meth:`generate_until` as an evaluation runs (``fit --layer --select generation`` scores
        candidate corrections this way)."""
        saved = self._layer_corrections
        self._layer_corrections = dict(corrections)
        try:
            yield
        finally:
            self._layer_corrections = saved

    def _model_generate(
        self, context: Any, max_length: int, stop: list[str], **generation_kwargs: Any
    ) -> torch.Tensor:
        """Generation with the correction applied to the label logits at every decoding step."""
        if not self._corrections:
            return super()._model_generate(context, max_length, stop, **generation_kwargs)
        if len(self._corrections) != 1:
            from lm_eval_robust.scoring.correction import CorrectionError

            raise CorrectionError(
                "generation applies one correction to every request, but "
                f"{len(self._corrections)} are loaded ({sorted(self._corrections)}); pass a "
                "single correction file"
            )
        corr = next(iter(self._corrections.values()))
        with corrected_head(self.model, corr):
            return super()._model_generate(context, max_length, stop, **generation_kwargs)

    #: prompts per forward of the last-positions path when the user gives no batch size
    default_fast_batch: ClassVar[Mapping[str, int]] = {"cpu": 16, "cuda": 64}

    def _fast_batch_size(self) -> int:
        """``fast_batch_size=N`` if given; else ``--batch_size`` if above 1; else the default of
        the device (the harness's default batch size 1 reads as "not given": scoring one prompt
        per forward would be the slowest path, and the label scores move no further between
        batch sizes than ``--model hf``'s own do)."""
        if self._fast_batch_setting is not None:
            return self._fast_batch_setting
        bs = self.batch_size
        if str(bs).isdigit() and int(bs) > 1:
            return int(bs)
        return self.default_fast_batch.get(self.device.type, 16)

    def _last_positions_loglikelihood(
        self, rows: list[_Row], disable_tqdm: bool
    ) -> Iterator[tuple[int, tuple[float, bool]]]:
        # One forward row per distinct input (and correction), as the harness's logits cache
        # does for choices sharing a context; the head runs on the scored positions only. With
        # per-task LoRA adapters, each adapter's rows run as one group under its adapter.
        bar = tqdm(
            total=sum(_n_prompts(r) for r in rows),
            disable=disable_tqdm or self.rank != 0,
            desc=f"debiased_hf: prompts scored ({len(rows)} distinct model inputs)",
            unit="prompt",
        )
        groups: dict[str | None, list[_Row]] = defaultdict(list)
        for row in rows:
            groups[row.adapter].append(row)
        for adapter in sorted(groups, key=lambda k: k or ""):
            with self._adapter_attached(adapter):
                yield from self._score_rows(groups[adapter], bar)
        bar.close()

    def _score_rows(self, rows: list[_Row], bar: Any) -> Iterator[tuple[int, tuple[float, bool]]]:
        if self._prefix_cache is not None:
            # rows sharing a prompt prefix (Definition + demonstrations) stay together, so each
            # prefix's key/value cache is computed once
            # a shared prefix ends before every scored position of its rows
            longest = max(len(cont) for r in rows for _, cont in r.requests)
            n_keep = max(self.max_fast_tokens, longest)
            order = self._prefix_cache.plan([r.inp for r in rows], n_keep=n_keep)
            rows = [rows[i] for i in order]
        else:
            rows = sorted(rows, key=lambda r: (-len(r.inp), r.inp, r.key or ""))
        bs = self._fast_batch_size()
        if "auto" not in str(self.batch_size):
            # the results JSON's ``batch_sizes`` (lm-eval writes this dict's values there, as
            # for hf's batch_size=auto): the prompts per forward really used. Under auto the
            # dict is hf's own batch schedule and is left to it.
            self.batch_sizes["last_positions"] = bs
        for start in range(0, len(rows), bs):
            chunk = rows[start : start + bs]
            n_keep = max(len(cont) for r in chunk for _, cont in r.requests)
            logits, hidden = self._forward_last([r.inp for r in chunk], n_keep)
            logits = self._label_scorer.scores(logits, hidden)
            for b, row in enumerate(chunk):
                self._debias_row(row, logits[b, -1], hidden[b, -1])
            logprobs = F.log_softmax(logits, dim=-1, dtype=torch.float32)
            greedy = logprobs.argmax(dim=-1)
            for b, row in enumerate(chunk):
                for i, cont in row.requests:
                    n = len(cont)
                    toks = torch.tensor(cont, dtype=torch.long, device=logprobs.device)
                    lp = logprobs[b, n_keep - n :, :].gather(-1, toks.unsqueeze(-1)).sum()
                    is_greedy = bool((greedy[b, n_keep - n :] == toks).all())
                    yield i, (float(lp), is_greedy)
            bar.update(sum(_n_prompts(r) for r in chunk))

    def _debias_row(self, row: _Row, logits: torch.Tensor, hidden: torch.Tensor) -> None:
        """Record features, then apply the row's correction to its label logits (in place)."""
        if not row.docs:
            return
        doc_ids = {doc: [toks[k] for k in sorted(toks)] for doc, toks in row.docs.items()}
        if self._collector is not None:
            for (task, doc_id), ids in doc_ids.items():
                self._collector.add(task, doc_id, hidden, logits[ids], ids)
        if row.key is None:
            return
        from lm_eval_robust.scoring.debias import apply_correction

        corr = self._corrections[row.key]
        ids = next(iter(doc_ids.values()))
        if len(ids) != corr.d:
            from lm_eval_robust.scoring.correction import CorrectionError

            raise CorrectionError(
                f"correction for {row.key!r} has {corr.d} labels {corr.labels} but this task's "
                f"prompts have {len(ids)}; fit the correction for this task"
            )
        if not corr.stats.get("labels_are_positions") and ids != corr.label_token_ids:
            from lm_eval_robust.scoring.correction import CorrectionError

            raise CorrectionError(
                f"correction for {row.key!r} scores label tokens {corr.label_token_ids} "
                f"({corr.labels}) but these prompts score {ids}; fit it for this task and model"
            )
        idx = torch.tensor(ids, dtype=torch.long, device=logits.device)
        fixed = apply_correction(corr, hidden.unsqueeze(0), logits[idx].unsqueeze(0))[0]
        logits[idx] = fixed.to(logits.dtype)

    def _forward_last(
        self, inputs: Sequence[tuple[int, ...]], n_keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw logits and head inputs at each input's last ``n_keep`` positions.

        Returns ``([batch, n_keep, vocab], [batch, n_keep, hidden])``.
        """
        if self._prefix_cache is not None:
            return self._prefix_cache.forward_last(inputs, n_keep)
        width = max(len(c) for c in inputs)
        inps = torch.zeros((len(inputs), width), dtype=torch.long, device=self.device)
        for row, inp in enumerate(inputs):  # right padding with 0, as the harness does
            inps[row, : len(inp)] = torch.tensor(inp, dtype=torch.long)
        ends = torch.tensor([len(c) for c in inputs], dtype=torch.long)
        positions = (ends.unsqueeze(1) - n_keep + torch.arange(n_keep)).clamp(min=0)
        with last_positions_head(self.model, positions) as captured:
            logits = self._model_call(inps)  # [batch, n_keep, vocab]
        return logits, captured["hidden"]


class PromptStyleError(UserError):
    """Prompts in another style than the task or correction asks for."""


class TruncationError(UserError):
    """Prompts of our tasks (and of wrapped variants) longer than the model's input window."""


def _truncation_message(cut: Mapping[str, list[int]], n_requests: int, max_length: int) -> str:
    """One line: per task, how many requests are cut by ``max_length`` and the longest."""
    parts = [
        f"{task}: {len(n)} of {n_requests}, longest {max(n)}" for task, n in sorted(cut.items())
    ]
    return (
        f"requests longer than max_length={max_length} tokens would be scored cut short "
        f"({'; '.join(parts)}); raise max_length in --model_args (or drop it for the model's "
        "own limit), or shorten the prompts (max_doc_words, n_shots)"
    )


def _truncation_warning(cut: Mapping[str, list[int]], max_length: int) -> str:
    """One line: per task, how many requests only their last ``max_length`` tokens score."""
    parts = [f"{task}: {len(n)}, longest {max(n)}" for task, n in sorted(cut.items())]
    return (
        f"requests longer than max_length={max_length} tokens are scored on their last "
        f"{max_length} tokens, as --model hf scores them ({'; '.join(parts)}); raise max_length "
        "in --model_args to score them whole"
    )


def _is_wrapped(req: Any) -> bool:
    """A doc of a perturbed variant of another task (lm_eval_robust.tasks.wrap)."""
    doc = getattr(req, "doc", None)
    return isinstance(doc, dict) and "_lmer" in doc


def _is_ours(req: Any) -> bool:
    doc = getattr(req, "doc", None)
    return isinstance(doc, dict) and "pert_id" in doc and "choices" in doc and "labels" in doc
