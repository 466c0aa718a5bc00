"""Checks of user input that run before any work starts, each failing with one line.

Booleans, model args, dtypes, files offered as inputs, ``--metadata`` keys and the size of a
task's docs. Every check raises the caller's :class:`UserError` subclass (or ``UserError``) with a
message that names the problem and the fix.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lm_eval_robust.base.errors import UserError

TRUE_WORDS = ("true", "yes", "y", "on", "1", "t")
FALSE_WORDS = ("false", "no", "n", "off", "0", "f")


def parse_bool(value: Any, name: str, error: type[UserError] = UserError) -> bool:
    """``value`` as a boolean: True/False, or one of the usual spellings; anything else refused."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise error(f"{name}={value!r} is not a boolean; use {name}=true or {name}=false")


def nearest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The closest of ``choices`` to ``word`` (None when nothing is within ``cutoff``)."""
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=cutoff)
    return found[0] if found else None


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    near = nearest(word, choices)
    return f"did you mean {near!r}?" if near else f"valid: {', '.join(sorted(set(choices)))}"


# ---------------------------------------------------------------------------------------------
# numeric options: one range each, the same in every command

#: bootstrap resamples every command accepts: fewer make the CIs' tails noise, more cost minutes
#: and gigabytes per task for no visible change (the paper uses 10 000)
RESAMPLES_MIN, RESAMPLES_MAX = 100, 100_000
#: CI levels every command accepts
CONFIDENCE_MIN, CONFIDENCE_MAX = 0.5, 0.999
#: seeds numpy accepts
SEED_MAX = 2**32 - 1


def check_resamples(
    resamples: int, flag: str = "--resamples", error: type[UserError] = UserError
) -> None:
    """Bootstrap resamples, with the same bounds in every command."""
    if not RESAMPLES_MIN <= resamples <= RESAMPLES_MAX:
        raise error(
            f"{flag} must be between {RESAMPLES_MIN} and {RESAMPLES_MAX:,}; got {resamples} "
            "(10000 is the paper's)"
        )


def check_confidence(
    confidence: float, flag: str = "--confidence", error: type[UserError] = UserError
) -> None:
    if not CONFIDENCE_MIN <= confidence <= CONFIDENCE_MAX:
        raise error(
            f"{flag} must be between {CONFIDENCE_MIN} and {CONFIDENCE_MAX}; got {confidence} "
            "(e.g. 0.95)"
        )


def check_seed(seed: int, flag: str = "--seed", error: type[UserError] = UserError) -> None:
    if not 0 <= seed <= SEED_MAX:
        raise error(f"{flag} must be between 0 and {SEED_MAX}; got {seed}")


# ---------------------------------------------------------------------------------------------
# files


def regular_file(path: str | os.PathLike[str], what: str, fix: str, error: type[UserError]) -> Path:
    """``path`` must be an existing, readable regular file (not a folder, FIFO or device).

    The file is opened without blocking (a FIFO with no writer would otherwise hang the caller).
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise error(f"{what} {p} not found; {fix}") from None
    except OSError as exc:
        raise error(f"cannot read {what} {p} ({exc.strerror or exc}); {fix}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{what} {p} is a folder, not a file; {fix}")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} {p} is not a regular file (a FIFO, socket or device); {fix}")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        os.close(fd)
    except OSError as exc:
        reason = "permission denied" if exc.errno == errno.EACCES else exc.strerror or str(exc)
        raise error(f"cannot read {what} {p} ({reason}); {fix}") from None
    return p


def read_bytes(path: str | os.PathLike[str], what: str, fix: str, error: type[UserError]) -> bytes:
    """The bytes of a checked regular file (see :func:`regular_file`)."""
    p = regular_file(path, what, fix, error)
    try:
        return p.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {what} {p} ({exc.strerror or exc}); {fix}") from None


# ---------------------------------------------------------------------------------------------
# model args

#: torch dtypes a model may be loaded in (plus "auto", which keeps the checkpoint's)
DTYPES = ("auto", "float32", "float16", "bfloat16", "float64", "half", "float", "double")

#: ``from_pretrained`` keyword arguments that HFLM forwards (beyond its own parameters)
FROM_PRETRAINED_KWARGS = (
    "attn_implementation",
    "cache_dir",
    "config",
    "device_map",
    "force_download",
    "gguf_file",
    "key_mapping",
    "load_in_4bit",
    "load_in_8bit",
    "local_files_only",
    "low_cpu_mem_usage",
    "max_memory",
    "offload_folder",
    "offload_state_dict",
    "output_loading_info",
    "quantization_config",
    "token",
    "torch_dtype",
    "tp_plan",
    "use_auth_token",
    "use_safetensors",
    "variant",
)


#: the model args ``debiased_hf`` adds to HFLM's (a test keeps this in step with its signature;
#: listed here so that checking a key does not import the model)
DEBIASED_HF_ARGS = (
    "pretrained",
    "correction",
    "collect_features",
    "prefix_cache",
    "layer_correction",
    "layer_positions",
    "lora",
    "fast_batch_size",
)


#: lm-eval model classes whose constructor args may reach a task's metadata (the harness merges
#: ``--model_args`` into it): the HF model, the API models (``local-completions`` ...) and vLLM's
#: (imported only where vLLM is installed)
_MODEL_CLASSES: tuple[tuple[str, str], ...] = (
    ("lm_eval.models.huggingface", "HFLM"),
    ("lm_eval.models.api_models", "TemplateAPI"),
    ("lm_eval.models.openai_completions", "LocalCompletionsAPI"),
    ("lm_eval.models.vllm_causallms", "VLLM"),
)

#: vLLM's args, known without importing vLLM (``--model vllm`` passes most through ``**kwargs``)
VLLM_ENGINE_ARGS: tuple[str, ...] = (
    "max_model_len",
    "tensor_parallel_size",
    "data_parallel_size",
    "gpu_memory_utilization",
    "swap_space",
    "enforce_eager",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "kv_cache_dtype",
    "block_size",
    "cpu_offload_gb",
    "pipeline_parallel_size",
    "distributed_executor_backend",
    "disable_log_stats",
    "tokenizer_mode",
)


def model_arg_names() -> set[str]:
    """Every model arg of the engines our tasks run on: ``debiased_hf``'s own, HFLM's and
    ``from_pretrained``'s, the API models' (``local-completions``) and, where vLLM is installed,
    ``vllm``'s (``debiased_vllm`` adds only ``debiased_hf``'s correction args to them)."""
    import importlib
    import inspect

    names: set[str] = set(FROM_PRETRAINED_KWARGS) | set(DEBIASED_HF_ARGS) | set(VLLM_ENGINE_ARGS)
    for module, attr in _MODEL_CLASSES:
        try:
            cls = getattr(importlib.import_module(module), attr)
        except Exception:  # an engine that is not installed has no args to accept
            continue
        for p in inspect.signature(cls.__init__).parameters.values():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self":
                names.add(p.name)
    return names


def check_dtype(dtype: Any, flag: str, error: type[UserError] = UserError) -> None:
    """A dtype given by name must be one torch loads models in."""
    if dtype is None or not isinstance(dtype, str):
        return
    if dtype.strip().lower() not in DTYPES:
        raise error(
            f"{flag} {dtype!r} is not a dtype; {_did_you_mean(dtype, DTYPES[1:4])} "
            f"(use one of {', '.join(DTYPES[:4])})"
        )


def check_model_folder(pretrained: Any, error: type[UserError] = UserError) -> None:
    """A local ``pretrained`` folder must hold a model (config.json); a hub id passes."""
    if not isinstance(pretrained, str) or not pretrained:
        return
    p = Path(pretrained)
    if p.is_dir() and not (p / "config.json").is_file():
        listing = sorted(x.name for x in p.iterdir())[:5]
        held = f"it holds {', '.join(listing)}" if listing else "it is empty"
        raise error(
            f"pretrained={pretrained} is a folder without config.json ({held}); pass a folder "
            "written by save_pretrained, a hub id or gemma-3-270m"
        )
    if p.exists() and not p.is_dir() and p.suffix != ".gguf":
        raise error(f"pretrained={pretrained} is a file; pass a model folder, a hub id or alias")


def check_model_args(kwargs: Mapping[str, Any], error: type[UserError] = UserError) -> None:
    """Unknown model args (with the nearest known one) and bad dtypes, before anything loads."""
    known = model_arg_names()
    for key in kwargs:
        if key not in known:
            raise error(
                f"unknown model arg {key!r}; {_did_you_mean(key, known)} "
                "(see the debiased_hf model args in the README)"
            )
    check_dtype(kwargs.get("dtype"), "dtype=", error)
    check_dtype(kwargs.get("torch_dtype"), "torch_dtype=", error)


# ---------------------------------------------------------------------------------------------
# task settings

#: a conservative estimate of the memory one doc takes beyond its prompt text (dict, Arrow copy)
DOC_OVERHEAD_BYTES = 2048


def memory_bytes() -> int | None:
    """The machine's physical memory, or None where it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_doc_budget(
    task: str, n_examples: int, n_prompts: int, prompt_chars: int, error: type[UserError]
) -> None:
    """Refuse a task whose docs could not fit in memory (n_examples x n_prompts prompts)."""
    total = memory_bytes()
    if total is None:
        return
    n_docs = n_examples * n_prompts
    need = n_docs * (3 * prompt_chars + DOC_OVERHEAD_BYTES)  # text, its Arrow copy, the dict
    if need > total // 2:
        most = max(1, (total // 2) // (n_examples * (3 * prompt_chars + DOC_OVERHEAD_BYTES)) - 1)
        raise error(
            f"{task}: {n_examples} examples x {n_prompts} prompts = {n_docs:.3g} docs need about "
            f"{need / 2**30:.3g} GiB, more than half of this machine's {total / 2**30:.0f} GiB; "
            f"lower n_perturbations (at most about {most}) or n_examples"
        )


def check_debiased_hf_args(
    pretrained: Any, prefix_cache: Any, paths: Mapping[str, Any], kwargs: Mapping[str, Any]
) -> None:
    """Every ``debiased_hf`` model arg, before the model loads (one line per problem)."""
    check_model_args(kwargs)
    if str(prefix_cache).strip().lower() != "auto":
        parse_bool(prefix_cache, "prefix_cache")
    check_model_folder(pretrained)
    for name, value in paths.items():
        if not value:
            continue
        p = Path(str(value))
        fix = f"check the path given as {name}="
        if not p.exists():
            raise UserError(f"{name}={value} not found; {fix}")
        if not p.is_dir():
            regular_file(p, f"{name} file", fix, UserError)


# ---------------------------------------------------------------------------------------------
# corrections

#: a correction may move a label logit by at most this many times the logits' own scale
SWAMP_RATIO = 1000.0


def correction_scale(corr: Any, head_rows: Any, x_norm: float | None = None) -> tuple[float, float]:
    """``(B, L)``: the correction's largest shift of a label logit on a typical prompt, and the
    logits' own scale, both at the hidden-state norm ``r``.

    ``L = max_i ‖h_i‖ r`` (``h_i`` the LM-head rows of the label tokens) and
    ``B = max_i (‖W[:n, i]‖ r + |c_i + β_i| (+ |W[n, i]| r for ψ = norm))``, ``c`` the constant
    row of ``W``; ``r`` is
    ``x_norm`` if given, else the RMS hidden-state norm the fit recorded, else ``√n``.
    """
    import numpy as np

    h = np.asarray(head_rows, dtype=np.float64)
    n = int(h.shape[-1])
    r = x_norm or corr.stats.get("x_norm") or float(np.sqrt(n))
    scale = float(np.linalg.norm(h, axis=-1).max()) * float(r)
    beta = np.asarray(corr.beta, dtype=np.float64)
    if corr.W is None:
        return float(np.abs(beta).max()), scale
    w = np.asarray(corr.W, dtype=np.float64)
    k = w.shape[0] - (1 if corr.psi == "linear" else 2)
    shift = np.linalg.norm(w[:k], axis=0) * r + np.abs(w[-1] + beta)
    if corr.psi == "norm":  # rows: x, ‖x‖, 1
        shift = shift + np.abs(w[k]) * r
    return float(shift.max()), scale


def check_correction_scale(
    corr: Any, head_rows: Any, where: str, error: type[UserError], x_norm: float | None = None
) -> None:
    """Refuse a correction that would swamp the logits: shift B > SWAMP_RATIO x scale L."""
    shift, scale = correction_scale(corr, head_rows, x_norm)
    if scale > 0 and shift > SWAMP_RATIO * scale:
        raise error(
            f"{where}: correction for {corr.task!r} shifts label logits by up to {shift:.3g}, "
            f"{shift / scale:.3g} times the logits' own scale {scale:.3g} (limit "
            f"{SWAMP_RATIO:g}x); it would decide every prediction by itself; refit it with "
            "`lm-eval-robust fit` (or a larger --lam)"
        )
