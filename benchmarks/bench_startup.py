"""What the start-up hook costs an interpreter that never imports lm_eval.

Runs ``python -X importtime -c pass`` repeatedly and reports the hook module's import time
(``_lm_eval_robust_hook``, cumulative) against the whole start-up's wall time, measured side by
side in the same loop.

    python benchmarks/bench_startup.py --runs 30 --out results/benchmarks.md
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    hook_us: list[float] = []
    wall_us: list[float] = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True
        )
        wall_us.append((time.perf_counter() - t0) * 1e6)
        lines = [
            ln for ln in out.stderr.splitlines() if ln.rstrip().endswith("_lm_eval_robust_hook")
        ]
        if not lines:
            raise SystemExit("the hook is not installed in this interpreter (pip install .)")
        hook_us.append(float(lines[0].split("|")[1]))
    hook, wall = statistics.median(hook_us), statistics.median(wall_us)
    text = (
        "\n## Start-up hook cost (interpreter that never imports lm_eval)\n\n"
        f"`python benchmarks/bench_startup.py --runs {args.runs}`\n\n"
        f"- hook import (cumulative, `-X importtime`): median {hook / 1000:.2f} ms\n"
        f"- whole `python -c pass` start-up (wall): median {wall / 1000:.1f} ms\n"
        f"- ratio: **{hook / wall:.1%}** of start-up; it imports only `os` and `sys` (already "
        "loaded) and installs one meta-path finder\n"
    )
    print(text)
    if args.out:
        with Path(args.out).open("a", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
