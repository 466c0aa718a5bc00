"""Reports over lm-eval runs of our tasks: robustness per task, paired base-vs-debiased deltas,
certificates, clustered BCa CIs, Markdown/CSV/JSON tables and plots.

``lm-eval-robust report RUN [RUN ...]`` (:func:`lm_eval_robust.report.cli.main`). Nothing heavy
is imported here: matplotlib loads only when plots are written.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from lm_eval_robust.report.cli import main as _main

    return _main(argv)
