"""The feature-shard file: what ``debiased_hf`` collects (``collect_features=DIR``), ``fit`` reads.

One safetensors file ``DIR/<task>/rank<r>.safetensors`` per task and data-parallel rank; one row
per doc of the task (clean prompts have ``pert_id == 0``). Tensors:

* ``head_rows`` float32 ``[d, n]``: LM-head rows of the clean prompts' label tokens;
* ``x`` float32 ``[rows, n]``: the LM head's input at the label position;
* ``label_logits`` float32 ``[rows, d]``; ``label_token_ids`` int64 ``[rows, d]``;
* ``pert_id`` int64 ``[rows]``; ``gold`` int64 ``[rows]``.

JSON metadata under :data:`META_KEY`: ``task``, per row ``example_id``, ``pert_kind`` and
``format_id``, then ``prompt_style``, ``label_score_dtype`` and the model ``fingerprint``.

:func:`write_shard` is the only writer (the collector of
:mod:`lm_eval_robust.scoring.feature_collector`), :func:`read_shard` the only reader
(:mod:`lm_eval_robust.values.features` merges a folder's shards). Nothing here imports torch: the
writer's tensors arrive as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from lm_eval_robust.base.errors import UserError

__all__ = [
    "META_KEY",
    "SHARD_GLOB",
    "SHARD_TENSORS",
    "FeatureFileError",
    "check_shard",
    "read_shard",
    "shard_files",
    "shard_header",
    "shard_path",
    "write_shard",
]

#: the safetensors metadata key holding the JSON header
META_KEY = "lm_eval_robust"

#: the shards of one task folder
SHARD_GLOB = "rank*.safetensors"

#: the tensors every shard holds, in the order they are written
SHARD_TENSORS = ("head_rows", "x", "label_logits", "label_token_ids", "pert_id", "gold")


class FeatureFileError(UserError):
    """Feature files that are missing, corrupt or inconsistent."""


def shard_path(directory: str | Path, task: str, rank: int) -> Path:
    """Where rank ``rank`` writes the shard of ``task``."""
    return Path(directory) / task / f"rank{rank}.safetensors"


def shard_files(directory: str | Path) -> list[Path]:
    """The shards of one task folder, sorted (none when the folder is missing)."""
    return sorted(Path(directory).glob(SHARD_GLOB))


def shard_header(
    *,
    task: str,
    example_id: list[str],
    pert_kind: list[str],
    format_id: list[str],
    prompt_style: str,
    label_score_dtype: str,
    fingerprint: dict[str, Any],
) -> dict[str, Any]:
    """The JSON header of one shard, its keys in the order they are written."""
    return {
        "task": task,
        "example_id": example_id,
        "pert_kind": pert_kind,
        "format_id": format_id,
        "prompt_style": prompt_style,
        "label_score_dtype": label_score_dtype,
        "fingerprint": fingerprint,
    }


def write_shard(
    path: Path,
    *,
    head_rows: Any,
    x: Any,
    label_logits: Any,
    label_token_ids: Any,
    pert_id: Any,
    gold: Any,
    header: dict[str, Any],
) -> None:
    """Write one shard (torch tensors, contiguous) atomically (:func:`lm_eval_robust.base.atomic.
    write_file`): a reader never sees half a shard."""
    from safetensors.torch import save

    from lm_eval_robust.base.atomic import write_file

    tensors = {
        "head_rows": head_rows,
        "x": x,
        "label_logits": label_logits,
        "label_token_ids": label_token_ids,
        "pert_id": pert_id,
        "gold": gold,
    }
    data = save(tensors, metadata={META_KEY: json.dumps(header)})
    write_file(data, path, "feature shard", FeatureFileError)


def check_shard(path: Path, t: dict[str, np.ndarray]) -> None:
    """Every tensor of :data:`SHARD_TENSORS` present, with shapes that agree."""
    missing = [k for k in SHARD_TENSORS if k not in t]
    if missing:
        raise FeatureFileError(f"{path} lacks {', '.join(missing)}; collect the features again")
    rows, n = t["x"].shape if t["x"].ndim == 2 else (-1, -1)
    d = t["label_logits"].shape[-1] if t["label_logits"].ndim == 2 else -1
    shapes_ok = (
        rows >= 0
        and t["label_logits"].shape == (rows, d)
        and t["label_token_ids"].shape == (rows, d)
        and t["pert_id"].shape == (rows,)
        and t["gold"].shape == (rows,)
        and t["head_rows"].shape == (d, n)
    )
    if not shapes_ok:
        shapes = ", ".join(f"{k} {tuple(t[k].shape)}" for k in SHARD_TENSORS)
        raise FeatureFileError(
            f"{path} has inconsistent shapes ({shapes}); collect the features again"
        )


def read_shard(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The tensors (numpy) and the JSON header of one shard, checked."""
    from safetensors import SafetensorError, safe_open

    from lm_eval_robust.base.validate import regular_file

    regular_file(path, "feature shard", "remove it and collect again", FeatureFileError)
    try:
        with safe_open(str(path), framework="numpy") as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise FeatureFileError(
            f"{path} is not a readable feature file ({exc}); collect again"
        ) from None
    if META_KEY not in meta:
        raise FeatureFileError(f"{path} has no lm_eval_robust metadata; collect again")
    check_shard(path, tensors)
    return tensors, json.loads(meta[META_KEY])
