"""LoRA training: an adapter on one layer's ``mlp.up_proj``, supervised on a task's train split.

The paper's Figure 7 setting (see :mod:`lm_eval_robust.scoring.lora` for the adapter and its use).
The prompts are the evaluation's own: the harness builds the ``<task>_train`` requests and
``debiased_hf`` encodes them (:func:`train_rows`). The loss is the cross-entropy of the gold
label over the task's scored label tokens (the distinguishing token ``debiased_hf`` scores, see
:func:`~lm_eval_robust.scoring.heads.check_label_tokens`), class-balanced, because the metric is
balanced accuracy. Training needs peft; applying an adapter needs nothing but torch.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lm_eval_robust.scoring.heads import check_label_tokens, last_positions_head
from lm_eval_robust.scoring.lora import LoraAdapter, LoraError, adapter_fingerprint, created_by

__all__ = [
    "LoraSettings",
    "TrainRow",
    "label_logits",
    "resolve_layer",
    "target_module_name",
    "train_lora",
    "train_rows",
]

#: the paper's layer 8 of 36 (Qwen3 8B), as a relative depth for other models
PAPER_RELATIVE_DEPTH = 8 / 36


@dataclass(frozen=True)
class LoraSettings:
    """Adapter and training settings (defaults: see the README's LoRA section for why)."""

    layer: int | None = None  # None: round(8/36 of the model's layers), the paper's depth
    module: str = "mlp.up_proj"
    rank: int = 8
    alpha: float = 16.0
    lr: float = 1e-3
    epochs: int = 2
    batch_size: int = 8
    weight_decay: float = 0.0
    balanced: bool = True  # class-balanced cross-entropy (the metric is balanced accuracy)
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.rank <= 1024, f"rank must be between 1 and 1024, got {self.rank}"),
            (1 <= self.epochs <= 1000, f"epochs must be between 1 and 1000, got {self.epochs}"),
            (
                1 <= self.batch_size <= 4096,
                f"batch size must be between 1 and 4096, got {self.batch_size}",
            ),
            (math.isfinite(self.lr) and self.lr > 0, f"lr must be > 0, got {self.lr}"),
            (math.isfinite(self.alpha) and self.alpha > 0, f"alpha must be > 0, got {self.alpha}"),
            (self.layer is None or self.layer >= 0, f"layer must be >= 0, got {self.layer}"),
            (self.weight_decay >= 0, f"weight decay must be >= 0, got {self.weight_decay}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise LoraError(msg)


@dataclass(frozen=True)
class TrainRow:
    """One train prompt: the forward input, the label tokens scored after it, the gold label."""

    inp: tuple[int, ...]
    label_ids: tuple[int, ...]
    gold: int
    example_id: str
    pert_id: int


def _decoder_layers(model: torch.nn.Module) -> list[str]:
    """Names of the decoder layers (``...layers.<i>``), in order."""
    names = [n for n, _ in model.named_modules() if n.rsplit(".", 1)[-1].isdigit()]
    layers = [n for n in names if n.rsplit(".", 2)[-2] == "layers"]
    return sorted(layers, key=lambda n: int(n.rsplit(".", 1)[-1]))


def resolve_layer(model: torch.nn.Module, layer: int | None) -> int:
    n = len(_decoder_layers(model))
    if n == 0:
        raise LoraError(f"{type(model).__name__} has no '<...>.layers.<i>' decoder layers")
    chosen = round(PAPER_RELATIVE_DEPTH * n) if layer is None else layer
    if not 0 <= chosen < n:
        raise LoraError(f"layer {chosen} is out of range: the model has layers 0..{n - 1}")
    return int(chosen)


def target_module_name(model: torch.nn.Module, layer: int | None, module: str) -> str:
    """The full name of ``layers.<layer>.<module>`` in ``model`` (exactly one must match)."""
    i = resolve_layer(model, layer)
    suffix = f"layers.{i}.{module}"
    found = [n for n, m in model.named_modules() if n.endswith(suffix) and _is_linear(m)]
    if len(found) != 1:
        raise LoraError(
            f"{'no' if not found else len(found)} linear module(s) named '*{suffix}' in "
            f"{type(model).__name__}; pick another --module (e.g. mlp.up_proj)"
        )
    return found[0]


def _is_linear(m: torch.nn.Module) -> bool:
    w = getattr(m, "weight", None)
    return isinstance(m, torch.nn.Linear) or (isinstance(w, torch.Tensor) and w.ndim == 2)


# --------------------------------------------------------------------------------------------
# training data: the evaluation's own prompts


def train_rows(lm: Any, task: str, metadata: Mapping[str, Any]) -> list[TrainRow]:
    """The prompts of ``task`` (a ``*_train`` task) as ``debiased_hf`` scores them.

    The harness builds the task's requests (clean + perturbed prompts, one request per label);
    ``lm`` (a ``debiased_hf``) encodes each pair as the evaluation does, and the row's input is
    the harness's window ``(context + continuation)[-(max_length+1):][:-1]``.
    """
    from lm_eval.tasks import TaskManager

    from lm_eval_robust.base.task_files import task_dir

    tm = TaskManager(include_path=task_dir(), include_defaults=False, metadata=dict(metadata))
    try:
        obj = tm.load([task])["tasks"][task]
    except KeyError:
        raise LoraError(f"unknown task {task!r}; use a perturbed train task") from None
    obj.build_all_requests(rank=0, world_size=1)
    by_doc: dict[int, list[Any]] = {}
    for inst in obj.instances:
        by_doc.setdefault(int(inst.doc_id), []).append(inst)
    rows = []
    for doc_id in sorted(by_doc):
        insts = sorted(by_doc[doc_id], key=lambda r: int(r.idx))
        doc = insts[0].doc
        encs = {}
        inputs = set()
        for inst in insts:
            context, continuation = inst.args
            ctx, cont = lm._encode_pair(context, continuation)
            encs[continuation] = cont
            inputs.add(tuple((ctx + cont)[-(lm.max_length + 1) :][:-1]))
        check_label_tokens(task, encs)
        if len(inputs) != 1:
            raise LoraError(f"{task} doc {doc_id}: labels do not share one prompt")
        rows.append(
            TrainRow(
                inp=inputs.pop(),
                label_ids=tuple(int(lm._encode_pair(*i.args)[1][-1]) for i in insts),
                gold=int(doc["gold"]),
                example_id=str(doc["example_id"]),
                pert_id=int(doc["pert_id"]),
            )
        )
    if not rows:
        raise LoraError(f"{task} has no train prompts; check --metadata")
    return rows


# --------------------------------------------------------------------------------------------
# training


def _batches(n: int, size: int, rng: random.Random) -> list[list[int]]:
    order = list(range(n))
    rng.shuffle(order)
    return [order[s : s + size] for s in range(0, n, size)]


def label_logits(model: torch.nn.Module, rows: Sequence[TrainRow]) -> torch.Tensor:
    """Logits of each row's label tokens at its last position, ``[len(rows), d]`` float32.

    Right-padded like the harness (causal attention: padding after a row's end cannot change
    its positions); the LM head runs on the last position only.
    """
    device = next(model.parameters()).device
    width = max(len(r.inp) for r in rows)
    inps = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        inps[i, : len(r.inp)] = torch.tensor(r.inp, dtype=torch.long)
    positions = torch.tensor([[len(r.inp) - 1] for r in rows], dtype=torch.long)
    with last_positions_head(model, positions):
        logits = model(input_ids=inps, use_cache=False).logits[:, -1, :]
    ids = torch.tensor([r.label_ids for r in rows], dtype=torch.long, device=logits.device)
    return logits.gather(1, ids).to(torch.float32)


def _class_weights(rows: Sequence[TrainRow], d: int, balanced: bool) -> torch.Tensor:
    if not balanced:
        return torch.ones(d)
    counts = np.bincount([r.gold for r in rows], minlength=d).astype(np.float64)
    w = np.where(counts > 0, counts.sum() / (d * np.maximum(counts, 1)), 0.0)
    return torch.tensor(w, dtype=torch.float32)


def train_lora(
    model: torch.nn.Module,
    tokenizer: Any,
    rows: Sequence[TrainRow],
    settings: LoraSettings,
    task: str,
    progress: bool = True,
) -> LoraAdapter:
    """Train an adapter on ``rows``; the model is left as it was (adapter removed, flags kept)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise LoraError(
            "training a LoRA adapter needs peft: pip install 'lm-eval-robust[lora]'"
        ) from None
    from tqdm import tqdm

    if not rows:
        raise LoraError(f"{task}: no train rows")
    widths = {len(r.label_ids) for r in rows}
    if len(widths) != 1:
        raise LoraError(f"{task}: train prompts have different numbers of labels {widths}")
    d = widths.pop()
    if any(not 0 <= r.gold < d for r in rows):
        raise LoraError(f"{task}: a gold label is outside the {d} scored labels")
    name = target_module_name(model, settings.layer, settings.module)
    fingerprint = adapter_fingerprint(model, tokenizer, name)
    grads = {n: p.requires_grad for n, p in model.named_parameters()}
    was_training = model.training
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,  # type: ignore[arg-type]  # any positive number works
        lora_dropout=0.0,
        target_modules=[name],
        bias="none",
    )
    peft_model = get_peft_model(model, config)
    try:
        peft_model.eval()  # no dropout; gradients still flow to the adapter
        params = [p for p in peft_model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
        weights = _class_weights(rows, d, settings.balanced)
        n_steps = settings.epochs * math.ceil(len(rows) / settings.batch_size)
        bar = tqdm(total=n_steps, disable=not progress, desc=f"lora {task}")
        epoch_loss: list[float] = []
        t0 = time.perf_counter()
        for _ in range(settings.epochs):
            total, count = 0.0, 0.0
            for idx in _batches(len(rows), settings.batch_size, rng):
                batch = [rows[i] for i in idx]
                lg = label_logits(peft_model, batch)
                gold = torch.tensor([r.gold for r in batch], dtype=torch.long, device=lg.device)
                loss = F.cross_entropy(lg, gold, weight=weights.to(lg.device), reduction="sum")
                norm = weights.to(lg.device)[gold].sum().clamp(min=1e-12)
                opt.zero_grad(set_to_none=True)
                (loss / norm).backward()
                opt.step()
                total += float(loss.detach())
                count += float(norm.detach())
                bar.update(1)
                bar.set_postfix(loss=f"{total / max(count, 1e-12):.4f}")
            epoch_loss.append(total / max(count, 1e-12))
        bar.close()
        seconds = time.perf_counter() - t0
        layer: Any = peft_model.get_submodule("base_model.model." + name)
        a = layer.lora_A["default"].weight.detach().to(torch.float32).cpu().clone()
        b = layer.lora_B["default"].weight.detach().to(torch.float32).cpu().clone()
        scaling = float(layer.scaling["default"])
    finally:
        restored = peft_model.unload()
        for n, p in restored.named_parameters():
            p.requires_grad_(grads.get(n, p.requires_grad))
        restored.train(was_training)
    return LoraAdapter(
        task=task,
        module=name,
        A=a,
        B=b,
        scaling=scaling,
        fingerprint=fingerprint,
        settings={**asdict(settings), "layer": resolve_layer(model, settings.layer)},
        stats={
            "n_rows": len(rows),
            "n_examples": len({r.example_id for r in rows}),
            "n_clean": sum(r.pert_id == 0 for r in rows),
            "n_steps": n_steps,
            "epoch_loss": epoch_loss,
            "train_seconds": seconds,
            "class_weights": weights.tolist(),
            "loss": "cross-entropy over the scored label tokens"
            + (", class-balanced" if settings.balanced else ""),
        },
        created_by=created_by(),
    )
