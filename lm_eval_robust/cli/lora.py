"""``lm-eval-robust lora``: LoRA baseline adapters trained on tasks' ``_train`` prompts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from lm_eval_robust.cli.args import (
    PROG,
    CommandParser,
    add_model_flags,
    model_kwargs,
    parse_metadata,
    perturbed_task,
    positive_int,
)
from lm_eval_robust.scoring.lora import LoraError

__all__ = ["build_parser", "main"]


def build_parser() -> CommandParser:
    from lm_eval_robust.scoring.lora_train import LoraSettings

    d = LoraSettings()
    p = CommandParser(
        "lora",
        "Train a LoRA adapter on one layer's MLP up-projection, supervised on a task's _train "
        "prompts (clean and perturbed, as the evaluation builds them); use it with "
        "--model_args lora=OUT.",
        f"{PROG} lora --task ni065_format_pert --pretrained gemma-3-270m -o adapters/",
    )
    p.add_argument("--task", required=True, help="perturbed task(s), e.g. ni065_format_pert,...")
    add_model_flags(p, batch_size=str(d.batch_size))
    p.add_argument("--layer", type=int, default=None, help="decoder layer (default: 8/36 depth)")
    p.add_argument("--module", default=d.module, help="module in the layer to adapt")
    p.add_argument("--rank", type=int, default=d.rank, help="adapter rank r")
    p.add_argument("--alpha", type=float, default=d.alpha, help="LoRA alpha (scaling alpha/rank)")
    p.add_argument("--lr", type=float, default=d.lr, help="AdamW learning rate")
    p.add_argument("--epochs", type=int, default=d.epochs, help="passes over the train prompts")
    p.add_argument("--seed", type=int, default=d.seed, help="initialisation and order seed")
    p.add_argument("--no_balanced", action="store_true", help="plain (not class-balanced) loss")
    p.add_argument("-o", "--out", required=True, help="folder for <task>.safetensors")
    return p


def main(argv: Sequence[str]) -> int:
    """``lm-eval-robust lora``: train one adapter per task and write ``OUT/<task>.safetensors``."""
    from lm_eval_robust.scoring.lora_train import LoraSettings

    args = build_parser().parse_args(list(argv))
    settings = LoraSettings(
        layer=args.layer,
        module=args.module,
        rank=args.rank,
        alpha=args.alpha,
        lr=args.lr,
        epochs=args.epochs,
        batch_size=positive_int("--batch_size", args.batch_size),
        seed=args.seed,
        balanced=not args.no_balanced,
    )
    # unknown or misspelt tasks: one line before any work
    keys = [perturbed_task(t) for t in args.task.split(",") if t.strip()]
    if not keys:
        raise LoraError("--task names no task; give e.g. ni065_format_pert")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise LoraError(f"-o {out} is a file; adapters go into a folder (one file per task)")
    from lm_eval_robust.base.atomic import refuse_overwrite
    from lm_eval_robust.base.validate import check_seed

    check_seed(args.seed)
    extra = model_kwargs(args.model_args)
    inputs = [("model folder", args.pretrained)]
    inputs += [(k, extra[k]) for k in ("correction", "lora", "layer_correction") if extra.get(k)]
    refuse_overwrite(out, "-o", inputs)
    from lm_eval_robust.base.atomic import atomic_dir, check_replaceable

    # the folder appears whole with every task's adapter, or not at all; an existing one is
    # replaced whole (no adapter of an earlier run left beside the new ones)
    check_replaceable(out, "-o", "lora", ("*.safetensors",))
    from lm_eval_robust.scoring.lora import save_adapter
    from lm_eval_robust.scoring.lora_train import train_lora, train_rows
    from lm_eval_robust.scoring.model import DebiasedHFLM
    from lm_eval_robust.tasks.settings import NIConfig

    md = parse_metadata(args.metadata)
    NIConfig.from_metadata(md)  # settings too, before the model loads
    lm = DebiasedHFLM(pretrained=args.pretrained, **extra)
    summaries = []
    with atomic_dir(out, "adapters") as staged:
        for key in keys:
            rows = train_rows(lm, key + "_train", md)
            adapter = train_lora(lm.model, lm.tokenizer, rows, settings, key)
            save_adapter(adapter, staged / f"{key}.safetensors")
            summaries.append(
                {
                    "task": key,
                    "module": adapter.module,
                    "rank": settings.rank,
                    "rows": len(rows),
                    "epoch_loss": [round(x, 4) for x in adapter.stats["epoch_loss"]],
                    "train_seconds": round(float(adapter.stats["train_seconds"]), 1),
                    "adapter_sha256": adapter.sha256,
                    "out": str(out / f"{key}.safetensors"),
                }
            )
    for summary in summaries:  # printed once the folder is in place
        print(json.dumps(summary), flush=True)
    return 0
