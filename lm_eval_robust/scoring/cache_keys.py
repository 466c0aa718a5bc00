"""``--use_cache`` entries keyed by every setting that changes a score.

lm-eval's ``CachingLM`` (0.4.13) keys an entry by the request alone, ``hash_args(attr,
req.args)``: the context and the continuation, in one SQLite table of the file ``--use_cache``
names. A cache filled by one model, correction, adapter or dtype therefore answers for any
other, and the run reports the cached scores as its own while its results file records the new
setting. ``debiased_hf`` moves its entries into a table of that file named by the hash of its
settings (:func:`cache_settings` lists them), so a cached value is reused only for an identical
setting and a new setting starts from an empty table; entries of other settings stay where they
are, in their own tables.

The switch happens where the harness hands the model its cache hook
(``LM.set_cache_hook``): the hook's ``SqliteDict`` is the object ``CachingLM`` reads and writes,
and it names its table on every query, so pointing it at another table is enough.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lm_eval_robust.base.errors import UserError

__all__ = [
    "CacheKeyError",
    "cache_settings",
    "files_digest",
    "key_cache",
    "key_model_cache",
    "table_name",
]

#: the prefix of our tables in a ``--use_cache`` file (lm-eval's own table is ``unnamed``)
TABLE_PREFIX = "lmer_"


class CacheKeyError(UserError):
    """A ``--use_cache`` database whose entries cannot be keyed by the model's settings."""


def files_digest(path: str | Path | None) -> str | None:
    """sha256 of a file, or of every file under a folder (relative names and bytes, sorted)."""
    if not path:
        return None
    p = Path(str(path))
    h = hashlib.sha256()
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    for f in files:
        h.update(str(f.relative_to(p) if f != p else f.name).encode("utf-8") + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def table_name(settings: Mapping[str, Any]) -> str:
    """The table of ``settings``: our prefix and 24 hex digits of their hash."""
    text = json.dumps(dict(settings), sort_keys=True, default=str)
    return TABLE_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def key_cache(dbdict: Any, settings: Mapping[str, Any]) -> str:
    """Point the harness's cache (a ``SqliteDict``) at the table of ``settings``; its name."""
    filename = getattr(dbdict, "filename", None)
    if filename is None or not isinstance(getattr(dbdict, "tablename", None), str):
        raise CacheKeyError(
            f"--use_cache: the harness's cache ({type(dbdict).__name__}) cannot be keyed by the "
            "model's settings, so a cached score could pass for another setting's; drop "
            "--use_cache"
        )
    from sqlitedict import SqliteDict

    name = table_name(settings)
    SqliteDict(filename, tablename=name, autocommit=True).close()  # creates the table
    dbdict.tablename = name
    return name


def cache_settings(lm: Any) -> dict[str, Any]:
    """Everything of a ``debiased_hf`` model that changes a score: the checkpoint (its head and
    tokenizer hashes, path, revision, dtype), the bytes of the correction, layer correction and
    LoRA files, where a layer correction applies, the input window and the prefix cache
    (half-precision scores move with it); the package version, for changes of the scoring code.
    The batch size is left out, as lm-eval leaves it out of its own keys."""
    from importlib.metadata import PackageNotFoundError, version

    from lm_eval_robust.scoring.label_scores import LABEL_SCORE_DTYPE

    try:
        ours = version("lm_eval_robust")
    except PackageNotFoundError:  # run from a source tree
        ours = "source"

    paths: Mapping[str, Any] = getattr(lm, "_setting_paths", {})
    return {
        "lm_eval_robust": ours,
        "label_score_dtype": LABEL_SCORE_DTYPE,
        "fingerprint": lm.fingerprint,
        "pretrained": str(getattr(lm.model.config, "_name_or_path", "")),
        "revision": getattr(lm, "revision", None),
        "dtype": str(getattr(lm.model, "dtype", "")),
        **{name: files_digest(path) for name, path in sorted(paths.items())},
        "layer_positions": getattr(lm, "_layer_positions", None),
        "max_length": lm.max_length,
        "add_bos_token": getattr(lm, "add_bos_token", None),
        "prefix_cache": getattr(lm, "_prefix_cache", None) is not None,
    }


def key_model_cache(lm: Any, dbdict: Any, collecting: bool) -> str:
    """The harness's cache of ``lm`` keyed by :func:`cache_settings`; refused while collecting
    features, whatever the cache holds (a cached answer skips the model, so its features would
    be missing)."""
    import logging

    if collecting:
        raise CacheKeyError(
            "collect_features= cannot be combined with --use_cache: requests answered from the "
            "cache skip the model, so their features would be missing; drop --use_cache or "
            "collect features in a run of its own"
        )
    table = key_cache(dbdict, cache_settings(lm))
    logging.getLogger(__name__).info("--use_cache: entries of these settings in table %s", table)
    return table
