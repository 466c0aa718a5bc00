"""``lm-eval-robust replay``: corrections applied to a logged run, without the model."""

from __future__ import annotations

from collections.abc import Sequence

from lm_eval_robust.cli.args import PROG, CommandParser

__all__ = ["build_parser", "main"]


def build_parser() -> CommandParser:
    p = CommandParser(
        "replay",
        "Apply label-logit corrections to a logged run (--log_samples) without running the "
        "model; writes a run folder for the report. Ridge corrections need the run's features "
        "(collect_features=DIR); constant and calibration corrections apply to the logged label "
        "scores of a run by any engine.",
        f"{PROG} replay runs/base --features feats/ --correction corrections/ -o runs/replayed",
    )
    p.add_argument("run", help="the base run's --output_path folder")
    p.add_argument(
        "--features",
        default=None,
        help="the base run's collect_features folder (default: none: only corrections without W "
        "(constant, calibration) apply, to the logged label scores)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="without --features: the checkpoint folder (or alias) the base run served, to check "
        "the correction's model fingerprint (default: the folder its model args name)",
    )
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
    from lm_eval_robust.report.replay import replay

    print(f"wrote {replay(args.run, args.features, args.correction, args.out, args.model)}")
    return 0
