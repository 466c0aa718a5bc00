"""``debiased_vllm``: our tasks on vLLM, scoring only the label position, with corrections.

The harness's ``--model vllm`` scores a continuation with ``prompt_logprobs``: a full-vocabulary
log-softmax at every prompt position (262k entries a token for Gemma). Here every distinct prompt
``context + continuation[:j]`` is one vLLM request that generates one token and asks, through
vLLM's ``logprob_token_ids``, for the full-vocabulary log-probabilities of exactly the tokens
scored there; the labels of one doc share that prompt (a shared leading piece such as Gemma's
``▁`` is one more request, whose prompt vLLM's prefix cache mostly holds already). The greedy
check compares each token with the one vLLM generated (temperature 0).

Corrections:

* a constant offset or calibration (no ``W``) changes only the label logits, so it is applied to
  the returned label log-probabilities with the exact renormalisation of
  :func:`lm_eval_robust.scoring.debias.corrected_label_logprobs`;
* a ridge correction with ``psi="linear"`` needs the head's input, which vLLM does not return; it
  is folded into the output layer instead (``lm-eval-robust export --constant offset``, cached
  under ``$LM_EVAL_ROBUST_CACHE/merged/``) and vLLM serves the merged checkpoint, with the constant
  part applied afterwards as above. ``psi="norm"`` is refused (not linear in the head's input).

Everything else (generation, rolling log-likelihoods, longer continuations,
``tensor_parallel_size``, ``data_parallel_size`` and any other vLLM engine argument) is the
harness's ``VLLM``.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from lm_eval.api.registry import register_model

from lm_eval_robust.base import vllm_alias
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.base.offline_models import cache_dir, resolve_pretrained
from lm_eval_robust.scoring.fingerprint import checkpoint_fingerprint
from lm_eval_robust.scoring.heads import LabelTokenError, check_label_tokens
from lm_eval_robust.tasks.data import check_data_dir_env

# vLLM's CPU wheel answers lm-eval's version("vllm") check only through the alias (this process)
vllm_alias.install()
from lm_eval.models.vllm_causallms import VLLM  # noqa: E402

log = logging.getLogger(__name__)

#: fraction of the machine's memory vLLM's CPU backend may reserve when none is given (its own
#: default, 0.92, fails wherever anything else runs)
CPU_MEMORY_FRACTION = 0.3


class VLLMCorrectionError(UserError):
    """A correction that ``debiased_vllm`` cannot apply; the message names the fix."""


@dataclass
class _Scored:
    """One prompt's answer: full-vocabulary log-probabilities of the asked tokens, the greedy
    token and its log-probability."""

    logprobs: dict[int, float]
    top: int
    top_logprob: float


def _file_sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@register_model("debiased_vllm")
class DebiasedVLLM(VLLM):
    """The harness's ``VLLM`` with label-position scoring and our corrections.

    Extra model args: ``pretrained`` also takes the offline aliases (``gemma-3-270m``, the
    default); ``correction=PATH``: a correction file or a folder of per-task files from
    ``lm-eval-robust fit`` (constant and calibration kinds apply to the label scores, one ridge
    correction is merged into the served checkpoint). On a CPU, ``dtype=auto`` loads a
    half-precision checkpoint in float32 where the CPU has no native bfloat16 (as ``debiased_hf``),
    and ``gpu_memory_utilization`` (vLLM's share of CPU memory there) defaults to 0.3.
    """

    #: continuations up to this many tokens take the label-position path
    max_fast_tokens: int = 4

    def __init__(
        self,
        pretrained: str = "gemma-3-270m",
        correction: str | None = None,
        **kwargs: Any,
    ) -> None:
        path = resolve_pretrained(str(pretrained))
        check_data_dir_env()
        from vllm.platforms import current_platform

        self._corrections: dict[str, Any] = {}
        served = path
        if correction:
            served = self._load_corrections(path, correction)
        if current_platform.is_cpu():
            kwargs.setdefault("gpu_memory_utilization", CPU_MEMORY_FRACTION)
            from lm_eval_robust.scoring.cpu_dtype import cpu_dtype_default

            chosen = cpu_dtype_default(path, {**kwargs, "device": "cpu"})
            if chosen is not None:
                kwargs["dtype"] = chosen
        kwargs.setdefault("enable_prefix_caching", True)
        kwargs.setdefault("tokenizer", path)
        from lm_eval_robust.scoring.cache_keys import files_digest

        # what changes a score, for --use_cache (lm_eval_robust.scoring.cache_keys)
        self._cache_settings = {
            "engine": "debiased_vllm",
            "pretrained": path,
            "correction": files_digest(correction),
            **{k: str(v) for k, v in sorted(kwargs.items())},
        }
        super().__init__(pretrained=served, **kwargs)
        self._served = served

    def set_cache_hook(self, cache_hook: Any) -> None:
        """``--use_cache``: entries keyed by the model, its correction's bytes and the engine
        args, so a cached score of another setting never passes for this one's."""
        if getattr(cache_hook, "dbdict", None) is not None:
            from lm_eval_robust.scoring.cache_keys import key_cache

            key_cache(cache_hook.dbdict, self._cache_settings)
        super().set_cache_hook(cache_hook)

    # ------------------------------------------------------------------ corrections
    def _load_corrections(self, path: str, correction: str) -> str:
        """Load and check the corrections; returns the checkpoint to serve (merged for ridge)."""
        from transformers import AutoTokenizer

        from lm_eval_robust.scoring.correction import load_corrections

        tok = AutoTokenizer.from_pretrained(path)
        fp = checkpoint_fingerprint(path, tok)
        found = load_corrections(correction, fp)
        ridge = {k: c for k, c in found.items() if c.W is not None}
        for key, corr in ridge.items():
            if not corr.mergeable:
                raise VLLMCorrectionError(
                    f"correction for {key!r} (psi={corr.psi!r}) uses the norm of the head's input, "
                    "which vLLM does not return and which cannot be merged into the head; apply "
                    "it with --model debiased_hf"
                )
        if len(ridge) > 1:
            raise VLLMCorrectionError(
                f"{len(ridge)} ridge corrections ({', '.join(sorted(ridge))}) would each need "
                "their own merged output layer; run one task per run with its own correction="
            )
        self._corrections = {k: c for k, c in found.items() if c.W is None}
        if not ridge:
            return path
        ((key, corr),) = ridge.items()
        merged = self._merged_checkpoint(path, str(_source_file(correction, key)))
        from lm_eval_robust.scoring.correction import load
        from lm_eval_robust.scoring.export import CONSTANT_PART

        part = merged / CONSTANT_PART
        if part.is_file():
            self._corrections[key] = load(part)
        log.info("debiased_vllm: ridge correction for %s merged into %s", key, merged)
        return str(merged)

    @staticmethod
    def _merged_checkpoint(path: str, correction_file: str) -> Path:
        """The checkpoint with the ridge rows folded into its head (made once, then cached)."""
        from lm_eval_robust.scoring.export import export

        name = hashlib.sha256(f"{Path(path).resolve()}|{_file_sha(correction_file)}".encode())
        out = cache_dir() / "merged" / name.hexdigest()[:16]
        if not (out / "config.json").is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            # float32 rows: merged bf16 rows would round the correction (vLLM's dtype= still
            # chooses the precision the engine runs in)
            export(path, correction_file, str(out), dtype="float32", constant="offset")
        return out

    # ------------------------------------------------------------------ log-likelihood
    def loglikelihood(
        self, requests: list[Any], disable_tqdm: bool = False
    ) -> list[tuple[float, bool]]:
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        slow: list[int] = []
        need: dict[tuple[int, ...], set[int]] = defaultdict(set)
        steps: dict[int, list[tuple[tuple[int, ...], int]]] = {}
        labels: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(dict)
        docs: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
        window = self.max_length - 1  # vLLM generates at least one token
        for i, req in enumerate(requests):
            context, continuation = req.args
            if not context:
                slow.append(i)
                continue
            ctx, cont = self._encode_pair(context, continuation)
            if _is_ours(req):
                key = (str(req.task_name), int(req.doc_id))
                labels[key][continuation] = cont
                docs[key][int(req.idx)] = i
            if not 1 <= len(cont) <= self.max_fast_tokens:
                slow.append(i)
                continue
            full = ctx + cont
            steps[i] = []
            for j, token in enumerate(cont):
                prompt = tuple(full[: len(ctx) + j][-window:])
                need[prompt].add(token)
                steps[i].append((prompt, token))
        for (task, _doc), encs in sorted(labels.items()):
            check_label_tokens(task, encs)
        if slow:
            if self._corrections and any(_is_ours(requests[i]) for i in slow):
                raise LabelTokenError(
                    f"corrections need label continuations of at most {self.max_fast_tokens} tokens"
                )
            for i, r in zip(slow, super().loglikelihood([requests[i] for i in slow]), strict=True):
                results[i] = r
        scored = self._score_prompts(need)
        for i, path in steps.items():
            ll = sum(scored[p].logprobs[t] for p, t in path)
            results[i] = (float(ll), all(scored[p].top == t for p, t in path))
        if self._corrections:
            self._apply_corrections(requests, docs, steps, scored, results)
        for i in steps:
            self.cache_hook.add_partial("loglikelihood", requests[i].args, results[i])
        return [r if r is not None else (float("-inf"), False) for r in results]

    def _score_prompts(self, need: Mapping[tuple[int, ...], set[int]]) -> dict[Any, _Scored]:
        """One one-token generation per distinct prompt, with the asked tokens' log-probs."""
        from vllm import SamplingParams

        prompts = sorted(need)  # neighbours share prefixes
        params = [
            SamplingParams(
                temperature=0,
                max_tokens=1,
                logprob_token_ids=sorted(need[p]),
                detokenize=False,
            )
            for p in prompts
        ]
        outputs = self._model_generate(
            requests=[list(p) for p in prompts], generate=True, sampling_params=params
        )
        scored: dict[Any, _Scored] = {}
        for prompt, out in zip(prompts, outputs, strict=True):
            gen = out.outputs[0]
            top = int(gen.token_ids[0])
            lps = {int(t): float(getattr(v, "logprob", v)) for t, v in gen.logprobs[0].items()}
            missing = need[prompt] - lps.keys()
            if missing:
                raise UserError(
                    f"vLLM returned no log-probabilities for tokens {sorted(missing)}; this vLLM "
                    "does not support logprob_token_ids (needs vLLM >= 0.32): use --model vllm"
                )
            scored[prompt] = _Scored(logprobs=lps, top=top, top_logprob=lps[top])
        return scored

    def _apply_corrections(
        self,
        requests: list[Any],
        docs: Mapping[tuple[str, int], Mapping[int, int]],
        steps: Mapping[int, list[tuple[tuple[int, ...], int]]],
        scored: Mapping[Any, _Scored],
        results: list[tuple[float, bool] | None],
    ) -> None:
        """Subtract each doc's correction from its label logits (renormalised, exactly)."""
        from lm_eval_robust.scoring.correction import correction_key
        from lm_eval_robust.scoring.debias import corrected_label_logprobs

        for (task, _doc), by_idx in docs.items():
            key = correction_key(task)
            corr = self._corrections.get(key)
            if corr is None:
                raise VLLMCorrectionError(
                    f"no correction for task {task!r} (have: {sorted(self._corrections)}); fit "
                    f"one with `lm-eval-robust fit --task {key}` or drop correction="
                )
            order = [by_idx[k] for k in sorted(by_idx)]
            prompt = steps[order[0]][-1][0]
            ids = [steps[i][-1][1] for i in order]
            if len(ids) != corr.d or (
                not corr.stats.get("labels_are_positions") and ids != corr.label_token_ids
            ):
                raise VLLMCorrectionError(
                    f"correction for {key!r} scores label tokens {corr.label_token_ids} "
                    f"({corr.labels}) but these prompts score {ids}; fit it for this task and model"
                )
            s = scored[prompt]
            lp = np.array([s.logprobs[t] for t in ids], dtype=np.float64)
            fixed = corrected_label_logprobs(lp, np.asarray(corr.beta, dtype=np.float64))
            # the greedy token after the correction: the best label, or the uncorrected greedy
            # token if it is no label (every other token moves by the same normaliser)
            shift = float(fixed[0] - lp[0] + corr.beta[0])
            rival = s.top_logprob + shift if s.top not in ids else -np.inf
            best = max(float(fixed.max()), rival)
            for k, i in enumerate(order):
                rest = steps[i][:-1]
                ll = sum(scored[p].logprobs[t] for p, t in rest) + float(fixed[k])
                greedy = all(scored[p].top == t for p, t in rest) and float(fixed[k]) >= best
                results[i] = (float(ll), greedy)

    def close(self) -> None:
        """Stop vLLM's engine processes now (a second engine in one process needs the memory)."""
        core = getattr(getattr(self.model, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()

    def get_model_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {}
        try:
            info = dict(super().get_model_info())
        except Exception:
            info = {}
        dtype = getattr(getattr(self.model, "llm_engine", None), "model_config", None)
        info["model_dtype"] = str(getattr(dtype, "dtype", ""))  # torch.float32, as hf writes it
        fp32 = info["model_dtype"].removeprefix("torch.") == "float32"
        info["label_score_dtype"] = "float32" if fp32 else "mixed"
        info["served_checkpoint"] = self._served
        return info


def _source_file(correction: str, key: str) -> Path:
    """The correction file of task ``key`` (``correction`` is a file or a folder of them)."""
    from lm_eval_robust.scoring.correction import load

    p = Path(correction)
    if not p.is_dir():
        return p
    for f in sorted(p.glob("*.safetensors")):
        if load(f).task == key:
            return f
    raise VLLMCorrectionError(f"no correction file for {key!r} in {p}")


def _is_ours(req: Any) -> bool:
    doc = getattr(req, "doc", None)
    return isinstance(doc, dict) and "pert_id" in doc and "choices" in doc and "labels" in doc
