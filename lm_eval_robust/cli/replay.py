"""``lm-eval-robust replay``: corrections applied to a logged run, without the model."""

from __future__ import annotations

from collections.abc import Sequence

from lm_eval_robust.cli.args import PROG, CommandParser

__all__ = ["build_parser", "main"]


def build_parser() -> CommandParser:
    p = CommandParser(
        "replay",
        "Apply label-logit corrections to a logged run (--log_samples and "
        "collect_features=DIR) without running the model; writes a run folder for the report.",
        f"{PROG} replay runs/base --features feats/ --correction corrections/ -o runs/replayed",
    )
    p.add_argument("run", help="the base run's --output_path folder")
    p.add_argument("--features", required=True, help="the base run's collect_features folder")
    p.add_argument(
        "--correction",
        default=None,
        help="correction file or folder (fit -o) (default: none: the run is only rescored, "
        "label scores of a half-precision run recomputed in float32 from its features)",
    )
    p.add_argument("-o", "--out", required=True, help="output folder of the replayed run")
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    from lm_eval_robust.replay import replay

    print(f"wrote {replay(args.run, args.features, args.correction, args.out)}")
    return 0
