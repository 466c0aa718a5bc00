"""Point a stock task config at local files, without editing its YAML.

``--metadata '{"local_data": "DIR"}'`` makes every task the harness loads in that run (wrapped or
not) read its splits from ``DIR/<dataset>/<config>/<split>.jsonl`` when that folder exists, where
``<dataset>`` is the last part of the config's ``dataset_path`` (``hails/bigbench`` ->
``bigbench``, ``openai/gsm8k`` -> ``gsm8k``) and ``<config>`` its ``dataset_name`` (``default``
when it has none). The config is rewritten in memory to the ``json`` loader with those
``data_files``; its splits, prompts, choices, targets, filters and metrics stay the stock ones.
Tasks whose folder is absent keep reading the hub. ``lm-eval-robust wrap data`` writes such
folders for the BIG-bench ``task.json`` files and GSM8K's ``test.jsonl``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lm_eval_robust.tasks.wrap.settings import WrapError

log = logging.getLogger(__name__)

SPLIT_KEYS = ("test_split", "validation_split", "training_split", "fewshot_split")


def dataset_folder(cfg: Mapping[str, Any], root: str | Path) -> Path | None:
    """``root/<dataset>/<config>`` for a task config (None: the config names no dataset)."""
    path = cfg.get("dataset_path")
    if not path or not isinstance(path, str):
        return None
    name = cfg.get("dataset_name") or "default"
    return Path(root).expanduser() / path.rstrip("/").split("/")[-1] / str(name)


def _fewshot_split(cfg: Mapping[str, Any]) -> str | None:
    fs = cfg.get("fewshot_config")
    if isinstance(fs, Mapping) and fs.get("split"):
        return str(fs["split"])
    value = cfg.get("fewshot_split")
    return str(value) if value else None


def local_files(cfg: Mapping[str, Any], root: str | Path) -> dict[str, Path] | None:
    """Split -> local file for each split the config names that exists (None: no folder)."""
    folder = dataset_folder(cfg, root)
    if folder is None or not folder.is_dir():
        return None
    wanted = {str(cfg[k]) for k in SPLIT_KEYS[:3] if cfg.get(k)}
    if (fs := _fewshot_split(cfg)) is not None:
        wanted.add(fs)
    return {s: folder / f"{s}.jsonl" for s in sorted(wanted) if (folder / f"{s}.jsonl").is_file()}


def apply_local_data(cfg: dict[str, Any], root: str | Path) -> dict[str, Any]:
    """``cfg`` reading its data from ``root`` (unchanged when ``root`` has no folder for it).

    A missing evaluation split is a one-line error; a missing few-shot split makes the demos come
    from the evaluation split (the harness then leaves the evaluated doc out of its own demos), said
    in one warning line; a missing training/validation split that nothing else needs is dropped.
    """
    files = local_files(cfg, root)
    if files is None:
        return cfg
    folder = dataset_folder(cfg, root)
    task = cfg.get("task", "?")
    eval_split = cfg.get("test_split") or cfg.get("validation_split")
    if not eval_split or str(eval_split) not in files:
        raise WrapError(
            f"{task}: {folder}/{eval_split}.jsonl not found (local_data={root}); write it with "
            "`lm-eval-robust wrap data` or drop local_data to read the hub"
        )
    out = dict(cfg)
    fs = _fewshot_split(cfg)
    if fs is not None and fs not in files:
        log.warning(
            "%s: no local %s split in %s: few-shot demos come from the %s split "
            "(the evaluated doc is never its own demo)",
            task,
            fs,
            folder,
            eval_split,
        )
        out["fewshot_split"] = str(eval_split)
        if isinstance(out.get("fewshot_config"), Mapping) and out["fewshot_config"].get("split"):
            out["fewshot_config"] = {**out["fewshot_config"], "split": str(eval_split)}
    for key in ("validation_split", "training_split"):
        if out.get(key) and str(out[key]) not in files:
            out[key] = None
    out["dataset_path"] = "json"
    out["dataset_name"] = None
    out["dataset_kwargs"] = {"data_files": {s: str(p) for s, p in files.items()}}
    return out
