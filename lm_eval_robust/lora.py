"""LoRA baseline: a low-rank adapter on one layer's ``mlp.up_proj``, supervised on the train split.

The paper's Figure 7 setting: an adapter on ``mlp.up_proj`` of one layer (layer 8 of Qwen3 8B's
36), trained on the clean and perturbed prompts of a task's train split with the ground-truth
labels. The prompts are the evaluation's own: the harness builds the ``<task>_train`` requests and
``debiased_hf`` encodes them (:func:`train_rows`). The loss is the cross-entropy of the gold
label over the task's scored label tokens (the distinguishing token ``debiased_hf`` scores, see
:func:`~lm_eval_robust.model.check_label_tokens`), class-balanced, because the metric is balanced
accuracy. Training uses peft; using an adapter needs nothing but torch.

An adapter is one safetensors file (``lora_A [r, in]``, ``lora_B [out, r]``, JSON metadata under
``"lm_eval_robust_lora"``) written atomically, with the base model's fingerprint and the hash of
the adapted weight: :func:`check_adapter` refuses an adapter trained for another model.
``debiased_hf`` takes ``lora=PATH`` (a file, or a folder of per-task files) and adds
``scaling · B A x`` to the module's output, in float32 beside the unchanged weight (what was
trained; folding it into bf16 weights would round small updates away).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lm_eval_robust.errors import UserError

__all__ = [
    "META_KEY",
    "LoraAdapter",
    "LoraError",
    "LoraSettings",
    "TrainRow",
    "adapter_fingerprint",
    "check_adapter",
    "load_adapter",
    "load_adapters",
    "save_adapter",
    "target_module_name",
    "train_lora",
    "train_rows",
]

META_KEY = "lm_eval_robust_lora"
SCHEMA_VERSION = 1
#: the paper's layer 8 of 36 (Qwen3 8B), as a relative depth for other models
PAPER_RELATIVE_DEPTH = 8 / 36


class LoraError(UserError):
    """An adapter, its settings or its training data that cannot be used (one line: why, fix)."""


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
            (self.rank >= 1, f"rank must be >= 1, got {self.rank}"),
            (self.epochs >= 1, f"epochs must be >= 1, got {self.epochs}"),
            (self.batch_size >= 1, f"batch size must be >= 1, got {self.batch_size}"),
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


@dataclass(eq=False)
class LoraAdapter:
    """``module(x) + scaling · (x Aᵀ) Bᵀ`` for one task; ``fingerprint`` is the base model's."""

    task: str
    module: str
    A: torch.Tensor  # [rank, in] float32
    B: torch.Tensor  # [out, rank] float32
    scaling: float
    fingerprint: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    created_by: str = ""

    @property
    def sha256(self) -> str:
        """Identity of the adapter (16 hex): its weights, scaling and target module."""
        h = hashlib.sha256()
        h.update(f"{self.module}|{self.scaling!r}|".encode())
        for t in (self.A, self.B):
            h.update(str(tuple(t.shape)).encode())
            h.update(t.detach().to(torch.float32).contiguous().cpu().numpy().tobytes())
        return h.hexdigest()[:16]

    @contextlib.contextmanager
    def attached(self, model: torch.nn.Module) -> Iterator[None]:
        """Add the adapter's output to the target module's for the duration (a forward hook)."""
        module = _get_module(model, self.module)
        device = _weight(module).device
        a = self.A.to(device=device)
        b = self.B.to(device=device)
        scaling = self.scaling

        def add(_m: torch.nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
            x = args[0].to(torch.float32)
            return (out.to(torch.float32) + scaling * ((x @ a.T) @ b.T)).to(out.dtype)

        handle = module.register_forward_hook(add)
        try:
            yield
        finally:
            handle.remove()


# --------------------------------------------------------------------------------------------
# the model side


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


def _weight(module: torch.nn.Module) -> torch.Tensor:
    w = getattr(module, "weight", None)
    if not isinstance(w, torch.Tensor):
        raise LoraError(f"{type(module).__name__} has no weight matrix to adapt")
    return w


def _get_module(model: torch.nn.Module, name: str) -> torch.nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise LoraError(
            f"this model has no module {name!r} that the adapter targets; it was trained for "
            "another architecture"
        ) from None


def adapter_fingerprint(model: torch.nn.Module, tokenizer: Any, module: str) -> dict[str, Any]:
    """The base model's fingerprint plus the hash of the adapted module's weight."""
    from lm_eval_robust.correction import _hash_tensor, model_fingerprint

    fp = model_fingerprint(model, tokenizer)
    weight = _weight(_get_module(model, module))
    fp["adapted_module"] = module
    fp["adapted_weight_sha256"] = _hash_tensor(weight)
    return fp


_ADAPTER_COMPARED = (
    "architecture",
    "hidden_size",
    "vocab_size",
    "head_sha256",
    "tokenizer_sha256",
    "adapted_weight_sha256",
)


def check_adapter(adapter: LoraAdapter, model: torch.nn.Module, tokenizer: Any) -> None:
    """Raise :class:`LoraError` unless ``adapter`` was trained on this model and tokenizer."""
    have = adapter_fingerprint(model, tokenizer, adapter.module)
    want = adapter.fingerprint
    diffs = [k for k in _ADAPTER_COMPARED if k in want and want.get(k) != have.get(k)]
    if diffs:
        name = want.get("name_or_path") or want.get("architecture", "?")
        mine = have.get("name_or_path") or have.get("architecture", "?")
        raise LoraError(
            f"LoRA adapter for {adapter.task!r} was trained on {name} but this model is {mine} "
            f"(differs in {', '.join(diffs)}); train it for this model with `lm-eval-robust lora`"
        )


# --------------------------------------------------------------------------------------------
# training data: the evaluation's own prompts


def train_rows(lm: Any, task: str, metadata: Mapping[str, Any]) -> list[TrainRow]:
    """The prompts of ``task`` (a ``*_train`` task) as ``debiased_hf`` scores them.

    The harness builds the task's requests (clean + perturbed prompts, one request per label);
    ``lm`` (a ``debiased_hf``) encodes each pair as the evaluation does, and the row's input is
    the harness's window ``(context + continuation)[-(max_length+1):][:-1]``.
    """
    from lm_eval.tasks import TaskManager

    from lm_eval_robust._plugin import task_dir
    from lm_eval_robust.model import check_label_tokens

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
    from lm_eval_robust.model import last_positions_head

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
        created_by=_created_by(),
    )


def _created_by() -> str:
    from lm_eval_robust.correction import _package_version

    return _package_version()


# --------------------------------------------------------------------------------------------
# files


def save_adapter(adapter: LoraAdapter, path: str | os.PathLike[str]) -> Path:
    """Write ``adapter`` to one safetensors file atomically (temp file, fsync, rename)."""
    from safetensors.torch import save as st_save

    meta = {
        "schema": SCHEMA_VERSION,
        "task": adapter.task,
        "module": adapter.module,
        "scaling": adapter.scaling,
        "fingerprint": adapter.fingerprint,
        "settings": adapter.settings,
        "stats": adapter.stats,
        "created_by": adapter.created_by,
        "adapter_sha256": adapter.sha256,
    }
    tensors = {"lora_A": adapter.A.contiguous(), "lora_B": adapter.B.contiguous()}
    data = st_save(tensors, metadata={META_KEY: json.dumps(meta, sort_keys=True)})
    from lm_eval_robust.correction import write_atomic

    return write_atomic(data, Path(path), what="the adapter")


def load_adapter(path: str | os.PathLike[str]) -> LoraAdapter:
    """Read an adapter written by :func:`save_adapter` (one-line :class:`LoraError` if not)."""
    from safetensors import SafetensorError, safe_open

    p = Path(path)
    if not p.is_file():
        raise LoraError(f"LoRA adapter not found: {p}; write it with `lm-eval-robust lora`")
    try:
        with safe_open(str(p), framework="pt") as fh:
            meta_all = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise LoraError(f"{p} is not a readable safetensors adapter ({exc})") from None
    if META_KEY not in meta_all:
        raise LoraError(f"{p} is not a LoRA adapter written by `lm-eval-robust lora`")
    try:
        meta = json.loads(meta_all[META_KEY])
        adapter = LoraAdapter(
            task=str(meta["task"]),
            module=str(meta["module"]),
            A=tensors["lora_A"].to(torch.float32),
            B=tensors["lora_B"].to(torch.float32),
            scaling=float(meta["scaling"]),
            fingerprint=dict(meta["fingerprint"]),
            settings=dict(meta.get("settings") or {}),
            stats=dict(meta.get("stats") or {}),
            created_by=str(meta.get("created_by", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise LoraError(f"{p}: malformed adapter ({exc}); train it again") from None
    if int(meta.get("schema", 0)) > SCHEMA_VERSION:
        raise LoraError(f"{p} uses adapter schema {meta.get('schema')}; upgrade lm-eval-robust")
    rank = adapter.A.shape[0]
    if adapter.A.ndim != 2 or adapter.B.ndim != 2 or adapter.B.shape[1] != rank:
        raise LoraError(
            f"{p}: lora_A {tuple(adapter.A.shape)} and lora_B {tuple(adapter.B.shape)} do not "
            "form a rank-r update"
        )
    return adapter


def load_adapters(path: str | os.PathLike[str]) -> dict[str, LoraAdapter]:
    """Adapters by task from a file or a folder of ``*.safetensors`` (one per task)."""
    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    if not files:
        raise LoraError(f"no *.safetensors adapters in {p}; write them with `lm-eval-robust lora`")
    out: dict[str, LoraAdapter] = {}
    for f in files:
        adapter = load_adapter(f)
        if adapter.task in out:
            raise LoraError(f"two LoRA adapters for task {adapter.task!r} in {p}; keep one")
        out[adapter.task] = adapter
    return out


# --------------------------------------------------------------------------------------------
# command line


def main(argv: Sequence[str]) -> int:
    """``lm-eval-robust lora``: train one adapter per task and write ``OUT/<task>.safetensors``."""
    from lm_eval_robust.correction import correction_key
    from lm_eval_robust.errors import OneLineArgumentParser
    from lm_eval_robust.tasks.specs import get_spec

    d = LoraSettings()
    p = OneLineArgumentParser(
        prog="lm-eval-robust lora",
        description=(
            "Train a LoRA adapter on one layer's MLP up-projection, supervised on a task's _train "
            "prompts (clean and perturbed, as the evaluation builds them); use it with "
            "--model_args lora=OUT."
        ),
    )
    p.add_argument("--task", required=True, help="perturbed task(s), e.g. ni065_format_pert,...")
    p.add_argument("--pretrained", default="gemma-3-270m")
    p.add_argument("--model-args", default="", help="extra model args, k=v,k=v (e.g. dtype=...)")
    p.add_argument("--metadata", default="{}", help="task settings as JSON, as for lm_eval")
    p.add_argument("--layer", type=int, default=None, help="decoder layer (default: 8/36 depth)")
    p.add_argument("--module", default=d.module, help="module in the layer to adapt")
    p.add_argument("--rank", type=int, default=d.rank)
    p.add_argument("--alpha", type=float, default=d.alpha, help="LoRA alpha (scaling alpha/rank)")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--no-balanced", action="store_true", help="plain (not class-balanced) loss")
    p.add_argument("-o", "--out", required=True, help="folder for <task>.safetensors")
    args = p.parse_args(list(argv))
    settings = LoraSettings(
        layer=args.layer,
        module=args.module,
        rank=args.rank,
        alpha=args.alpha,
        lr=args.lr,
        epochs=args.epochs,
        batch_size=args.batch_size,
        seed=args.seed,
        balanced=not args.no_balanced,
    )
    keys = [correction_key(t.strip()) for t in args.task.split(",") if t.strip()]
    for key in keys:
        get_spec(key.split("_")[0])  # unknown task: one-line error before any work
        if not key.endswith("_pert"):
            raise LoraError(f"--task {key}: use a perturbed task (clean + perturbed train prompts)")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise LoraError(f"-o {out} is a file; adapters go into a folder (one file per task)")
    from lm_eval_robust.cli import _model_kwargs, _parse_metadata
    from lm_eval_robust.model import DebiasedHFLM

    md = _parse_metadata(args.metadata)
    lm = DebiasedHFLM(pretrained=args.pretrained, **_model_kwargs(args.model_args))
    for key in keys:
        rows = train_rows(lm, key + "_train", md)
        adapter = train_lora(lm.model, lm.tokenizer, rows, settings, key)
        path = save_adapter(adapter, out / f"{key}.safetensors")
        summary = {
            "task": key,
            "module": adapter.module,
            "rank": settings.rank,
            "rows": len(rows),
            "epoch_loss": [round(x, 4) for x in adapter.stats["epoch_loss"]],
            "train_seconds": round(float(adapter.stats["train_seconds"]), 1),
            "adapter_sha256": adapter.sha256,
            "out": str(path),
        }
        print(json.dumps(summary), flush=True)
    return 0
