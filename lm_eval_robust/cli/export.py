"""``lm-eval-robust export``: fold a correction into the output layer (a normal checkpoint)."""

from __future__ import annotations

from collections.abc import Sequence

from lm_eval_robust.cli.args import PROG, CommandParser

__all__ = ["build_parser", "main"]


def build_parser() -> CommandParser:
    p = CommandParser(
        "export",
        "Fold a correction into the output layer and save a normal HF checkpoint.",
        f"{PROG} export --pretrained gemma-3-270m --correction corr.safetensors -o debiased/",
    )
    p.add_argument("--pretrained", required=True, help="HF model folder (or gemma-3-270m)")
    p.add_argument("--correction", required=True, help="correction file (psi=linear)")
    p.add_argument("--dtype", default=None, help="load/save dtype, e.g. float32 (default: as is)")
    p.add_argument(
        "--constant",
        default="bias",
        choices=["bias", "offset"],
        help="where the constant part goes: a head bias (custom model code where the head has "
        "none), or offset: a stock bias-free head (loads in vLLM) plus OUT/lm_eval_robust/"
        "constant_part.safetensors, a constant correction to apply with correction=",
    )
    p.add_argument("-o", "--out", required=True, help="output folder of the checkpoint")
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    from lm_eval_robust.scoring.export import export

    out = export(args.pretrained, args.correction, args.out, args.dtype, args.constant)
    print(f"wrote {out}")
    return 0
