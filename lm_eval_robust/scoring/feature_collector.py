"""Per-doc features of our tasks, gathered while ``debiased_hf`` scores them
(``collect_features=DIR``) and written as feature shards
(:mod:`lm_eval_robust.scoring.feature_shards`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.scoring.feature_shards import shard_header, shard_path, write_shard
from lm_eval_robust.scoring.label_scores import LABEL_SCORE_DTYPE

__all__ = ["FeatureCollector", "FeatureError"]


class FeatureError(UserError):
    """Collected features that cannot be used."""


class FeatureCollector:
    """Per-doc features of our tasks, written as one safetensors shard per task and rank."""

    def __init__(self, directory: str, inputs: Iterable[tuple[str, Any]] = ()) -> None:
        """Checks ``directory`` without creating it (the shards create it when they are
        written): writable, and neither one of the run's ``inputs`` (model folder, correction,
        adapter) nor inside or around one."""
        import os

        from lm_eval_robust.base.atomic import refuse_overwrite

        self.directory = Path(directory)
        refuse_overwrite(self.directory, "collect_features=", inputs)
        existing = self.directory
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            reason = "not a folder" if not existing.is_dir() else "not writable"
            raise FeatureError(
                f"cannot write features to {directory} ({existing} is {reason}); pass a writable "
                "folder as collect_features=DIR"
            )
        self._meta: dict[tuple[str, int], dict[str, Any]] = {}
        self._rows: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor, list[int]]] = {}
        self._styles: dict[str, str] = {}

    def note_doc(self, task: str, doc_id: int, doc: dict[str, Any], style: str = "plain") -> None:
        self._styles[task] = style
        self._meta[(task, doc_id)] = {
            "example_id": str(doc["example_id"]),
            "pert_id": int(doc["pert_id"]),
            "gold": int(doc["gold"]),
            "pert_kind": str(doc.get("pert_kind", "")),
            "format_id": str(doc.get("format_id", "")),
        }

    def add(
        self,
        task: str,
        doc_id: int,
        hidden: torch.Tensor,
        label_logits: torch.Tensor,
        ids: list[int],
    ) -> None:
        h = hidden.detach().float().cpu()
        lg = label_logits.detach().float().cpu()
        if not (torch.isfinite(h).all() and torch.isfinite(lg).all()):
            raise FeatureError(
                f"non-finite hidden state or label logits for {task} doc {doc_id}; run the model "
                "in float32 (--model_args dtype=float32) or check the checkpoint"
            )
        self._rows[(task, doc_id)] = (h, lg, ids)

    def write(
        self,
        rank: int,
        fingerprint: dict[str, Any] | Callable[[str], dict[str, Any]],
        head_weight: torch.Tensor,
    ) -> list[Path]:
        """One shard per task; ``fingerprint`` may depend on the task (per-task LoRA adapters)."""
        written = []
        tasks = sorted({t for t, _ in self._rows})
        for task in tasks:
            keys = sorted(k for k in self._rows if k[0] == task)
            x = torch.stack([self._rows[k][0] for k in keys])
            widths = {len(self._rows[k][2]) for k in keys}
            if len(widths) != 1:
                raise FeatureError(f"{task}: docs have different numbers of labels {widths}")
            logits = torch.stack([self._rows[k][1] for k in keys])
            ids = torch.tensor([self._rows[k][2] for k in keys], dtype=torch.long)
            meta = [self._meta[k] for k in keys]
            # LM-head rows of the clean prompts' label tokens (for the Lipschitz radius)
            first_clean = next((i for i, m in enumerate(meta) if m["pert_id"] == 0), 0)
            rows = head_weight.detach()[ids[first_clean].to(head_weight.device)].float().cpu()
            tensors: dict[str, torch.Tensor] = {
                "head_rows": rows.contiguous(),
                "x": x.contiguous(),
                "label_logits": logits.contiguous(),
                "label_token_ids": ids,
                "pert_id": torch.tensor([m["pert_id"] for m in meta], dtype=torch.long),
                "gold": torch.tensor([m["gold"] for m in meta], dtype=torch.long),
            }
            header = shard_header(
                task=task,
                example_id=[m["example_id"] for m in meta],
                pert_kind=[m["pert_kind"] for m in meta],
                format_id=[m["format_id"] for m in meta],
                prompt_style=self._styles.get(task, "plain"),
                label_score_dtype=LABEL_SCORE_DTYPE,
                fingerprint=fingerprint(task) if callable(fingerprint) else fingerprint,
            )
            out = shard_path(self.directory, task, rank)
            write_shard(out, **tensors, header=header)
            written.append(out)
        self._rows.clear()
        return written
