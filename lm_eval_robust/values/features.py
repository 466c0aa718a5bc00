"""Collected features (written by ``debiased_hf`` with ``collect_features=DIR``), as arrays.

A task's folder holds one shard per rank (data parallel; the file is
:mod:`lm_eval_robust.scoring.feature_shards`); :func:`load_features` merges them,
orders rows by (example, perturbation) and pairs every perturbed prompt with the clean prompt of
the same source example, which is what the fit needs: ``F = M(x̂) − M(x)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lm_eval_robust.scoring.feature_shards import FeatureFileError, read_shard, shard_files


@dataclass
class Features:
    """Rows of one task: clean rows have ``pert_id == 0``."""

    task: str
    x: np.ndarray  # [rows, n] head input at the label position (float32)
    label_logits: np.ndarray  # [rows, d]
    label_token_ids: np.ndarray  # [rows, d]
    pert_id: np.ndarray  # [rows]
    gold: np.ndarray  # [rows]
    example_id: np.ndarray  # [rows] str
    fingerprint: dict[str, Any]
    head_rows: np.ndarray  # [d, n] LM-head rows of the clean prompts' label tokens
    prompt_style: str = "plain"  # "plain" or "chat" (the model's chat template)
    #: "float32", or "float32 (rescored)" for shards recorded in the model's half precision
    label_score_dtype: str = "float32"
    #: the half-precision logits a rescored shard recorded (None when it recorded float32)
    label_logits_recorded: np.ndarray | None = None

    @property
    def clean(self) -> np.ndarray:
        return self.pert_id == 0

    def paired(self) -> PairedFeatures:
        """Perturbed rows with the clean row of their example (examples without one dropped)."""
        clean_idx = {e: i for i, e in enumerate(self.example_id) if self.pert_id[i] == 0}
        pert = [i for i in range(len(self.pert_id)) if self.pert_id[i] > 0]
        pert = [i for i in pert if self.example_id[i] in clean_idx]
        if not pert:
            raise FeatureFileError(
                f"{self.task}: no perturbed prompt has its clean prompt among the features; "
                "collect a perturbed task (e.g. ni065_format_pert_train), not a clean one"
            )
        ref = np.array([clean_idx[self.example_id[i]] for i in pert], dtype=np.int64)
        p = np.array(pert, dtype=np.int64)
        return PairedFeatures(
            x_pert=self.x[p],
            logits_pert=self.label_logits[p],
            x_clean_of_pert=self.x[ref],
            logits_clean_of_pert=self.label_logits[ref],
            gold=self.gold[p],
            example_id=self.example_id[p],
            x_clean=self.x[self.clean],
            logits_clean=self.label_logits[self.clean],
            gold_clean=self.gold[self.clean],
            example_id_clean=self.example_id[self.clean],
        )


@dataclass
class PairedFeatures:
    x_pert: np.ndarray
    logits_pert: np.ndarray
    x_clean_of_pert: np.ndarray
    logits_clean_of_pert: np.ndarray
    gold: np.ndarray
    example_id: np.ndarray
    x_clean: np.ndarray
    logits_clean: np.ndarray
    gold_clean: np.ndarray
    example_id_clean: np.ndarray

    @property
    def f(self) -> np.ndarray:
        """F = M(x̂) − M(x): perturbed minus clean label logits of the same example."""
        return self.logits_pert - self.logits_clean_of_pert


def _signature(tensors: dict[str, np.ndarray], header: dict[str, Any]) -> str:
    """What every shard of one collection shares: task, model, prompt style and widths."""
    x, lg = tensors.get("x"), tensors.get("label_logits")
    return json.dumps(
        [
            header.get("task"),
            header.get("fingerprint"),
            str(header.get("prompt_style", "plain")),
            None if x is None else list(x.shape[1:]),
            None if lg is None else list(lg.shape[1:]),
        ],
        sort_keys=True,
    )


def _check_one_collection(
    d: Path, shards: list[Path], parts: list[tuple[dict[str, np.ndarray], dict[str, Any]]]
) -> None:
    """Shards of one folder must come from one collection: name the stale ones if not."""
    newest = max(range(len(shards)), key=lambda i: shards[i].stat().st_mtime)
    sig = _signature(*parts[newest])
    stale = [s.name for s, p in zip(shards, parts, strict=True) if _signature(*p) != sig]
    if not stale:
        seen: dict[tuple[str, int], str] = {}
        for s, (t, h) in zip(shards, parts, strict=True):
            for e, pid in zip(h.get("example_id", []), t.get("pert_id", []), strict=False):
                other = seen.setdefault((str(e), int(pid)), s.name)
                if other != s.name:
                    older = min((other, s.name), key=lambda n: (d / n).stat().st_mtime)
                    stale.append(older)
                    break
    if stale:
        raise FeatureFileError(
            f"stale feature shard(s) {', '.join(sorted(set(stale)))} in {d} come from another "
            f"collection than {shards[newest].name} (other task, model, settings or the same "
            "prompts twice); delete them, or collect into an empty folder"
        )


def load_features(directory: str | Path) -> Features:
    """Merge the rank shards of one task folder."""
    d = Path(directory)
    shards = shard_files(d)
    if not shards:
        raise FeatureFileError(
            f"no feature shards (rank*.safetensors) in {d}; collect them with --model_args "
            "collect_features=DIR on a _train task"
        )
    parts = [read_shard(s) for s in shards]
    _check_one_collection(d, shards, parts)
    tasks = {h["task"] for _, h in parts}
    fps = {json.dumps(h["fingerprint"], sort_keys=True) for _, h in parts}
    styles = {str(h.get("prompt_style", "plain")) for _, h in parts}
    cat = {k: np.concatenate([t[k] for t, _ in parts]) for k in parts[0][0] if k != "head_rows"}
    ex = np.array([e for _, h in parts for e in h["example_id"]], dtype=object)
    order = np.lexsort((cat["pert_id"], ex.astype(str)))
    x = cat["x"][order].astype(np.float32)
    lg = cat["label_logits"][order].astype(np.float32)
    if not (np.isfinite(x).all() and np.isfinite(lg).all()):
        raise FeatureFileError(f"{d}: features contain NaN or inf; recollect in float32")
    head_rows = parts[0][0]["head_rows"].astype(np.float32)
    ids = cat["label_token_ids"][order]
    score_dtype = "float32"
    recorded = None
    if any(h.get("label_score_dtype") != "float32" for _, h in parts):
        recorded = lg
        fp = json.loads(next(iter(fps)))
        lg = rescore_label_logits(d, x, lg, ids, head_rows, fingerprint=fp)
        score_dtype = "float32 (rescored)"
    return Features(
        task=tasks.pop(),
        x=x,
        label_logits=lg,
        label_token_ids=ids,
        pert_id=cat["pert_id"][order],
        gold=cat["gold"][order],
        example_id=ex[order],
        fingerprint=json.loads(fps.pop()),
        head_rows=head_rows,
        prompt_style=styles.pop(),
        label_score_dtype=score_dtype,
        label_logits_recorded=recorded,
    )


def rescore_label_logits(
    where: Path,
    x: np.ndarray,
    recorded: np.ndarray,
    ids: np.ndarray,
    head_rows: np.ndarray,
    fingerprint: dict[str, Any] | None = None,
) -> np.ndarray:
    """Label logits recomputed in float32 as ``x · w_label`` for shards recorded before label
    scores were float32 (their logits are the model's half-precision ones, full of exact ties).

    ``x`` is the head's input exactly as the model computed it, so this is what the float32 path
    of ``debiased_hf`` computes live. When every row scores the tokens of the recorded head rows
    those rows suffice; when rows score different tokens (format perturbations that change the
    label's rendering) the head weight is read from the model folder the fingerprint names, and
    used only if its hash is the fingerprint's. It is refused when neither is possible, or when
    the recomputation disagrees with the recorded logits by more than their rounding (a head with
    a scale or soft-capping).
    """
    if ids.size and not (ids == ids[:1]).all():
        weight = _head_weight(where, fingerprint or {})
        rows = weight[ids.reshape(-1)].reshape(*ids.shape, -1)  # [rows, d, n]
        ours = np.einsum("rn,rdn->rd", x.astype(np.float32), rows).astype(np.float32)
    else:
        ours = (x.astype(np.float32) @ head_rows.T.astype(np.float32)).astype(np.float32)
    # each recorded value is ours rounded to bf16 (8 significant bits): at most half a unit in the
    # last place, one unit allowing for the order of summation
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(recorded), 2.0**-126))) - 7)
    excess = np.abs(ours - recorded) - ulp - 1e-6
    err = float(np.abs(ours - recorded).max()) if recorded.size else 0.0
    if recorded.size and float(excess.max()) > 0:
        raise FeatureFileError(
            f"{where}: recomputing the label logits in float32 from the recorded head inputs "
            f"differs from the recorded ones by {err:.3g} (more than their rounding); collect "
            "the features again with this version"
        )
    return ours


_HEADS: dict[str, np.ndarray] = {}


def _head_weight(where: Path, fingerprint: dict[str, Any]) -> np.ndarray:
    """The float32 LM-head weight of the model the fingerprint names, checked by its hash."""
    path = fingerprint.get("name_or_path")
    want = fingerprint.get("head_sha256")
    if not path or not want or not Path(str(path)).is_dir():
        raise FeatureFileError(
            f"{where}: half-precision features whose rows score different label tokens need the "
            f"model's head to be rescored in float32, and its folder {path!r} is not here; "
            "collect the features again"
        )
    if want not in _HEADS:
        import torch
        from transformers import AutoModelForCausalLM

        from lm_eval_robust.scoring.fingerprint import hash_tensor

        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16)
        weight = model.get_output_embeddings().weight.detach()
        if hash_tensor(weight) != want:
            raise FeatureFileError(
                f"{where}: the head of {path} is not the one these features were collected with; "
                "collect the features again"
            )
        _HEADS[want] = weight.float().numpy()
    return _HEADS[want]
