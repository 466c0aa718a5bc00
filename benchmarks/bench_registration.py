"""What the start-up hook adds to lm-eval's own start: registration at ``TaskManager()`` time.

Runs, side by side in one loop, ``python -X importtime`` on what ``lm_eval run`` imports before it
evaluates (``lm_eval.api.metrics``, ``lm_eval.models``, ``TaskManager()``) with the hook and with
``LM_EVAL_ROBUST_NO_HOOK=1``, and reports the medians of the summed self import times of every
module, of ours (``lm_eval_robust*``) and of scipy (``scipy*``), and whether scipy was imported.
``--tree DIR`` puts another checkout first on ``PYTHONPATH`` (its hook and package are used), so
two versions compare on one machine.

    python benchmarks/bench_registration.py --runs 5 [--tree ../other-checkout]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CODE = (
    "import lm_eval.api.metrics, lm_eval.models\n"
    "from lm_eval.tasks import TaskManager\n"
    "TaskManager()\n"
)


def _one(env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CODE],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    sums = {"all": 0.0, "ours": 0.0, "scipy": 0.0}
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, self_us, _, name = (p.strip() for p in line.replace("import time:", "|").split("|"))
        us = float(self_us)
        sums["all"] += us
        if name.startswith("lm_eval_robust") or name == "_lm_eval_robust_hook":
            sums["ours"] += us
        if name.split(".")[0] == "scipy":
            sums["scipy"] += us
    return sums


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tree", default=None, help="a checkout to import instead of this one")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.tree:
        env["PYTHONPATH"] = args.tree
    runs: dict[str, list[dict[str, float]]] = {"hook": [], "no hook": []}
    for _ in range(args.runs):
        runs["hook"].append(_one(env))
        runs["no hook"].append(_one({**env, "LM_EVAL_ROBUST_NO_HOOK": "1"}))
    print(
        f"`python benchmarks/bench_registration.py --runs {args.runs}`"
        + (f" `--tree {args.tree}`" if args.tree else "")
        + "\n"
    )
    print("| | all modules (ms) | lm_eval_robust* (ms) | scipy* (ms) |")
    print("|---|---|---|---|")
    for label, rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows) / 1000 for k in rows[0]}
        print(f"| {label} | {med['all']:.0f} | {med['ours']:.1f} | {med['scipy']:.1f} |")


if __name__ == "__main__":
    main()
