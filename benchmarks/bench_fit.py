"""Fit cost: feature collection + solve vs one plain evaluation pass over the same train prompts.

Both run in one process on the same requests, alternating; the collection pass is the evaluation
forward with the head's input recorded, then the ridge solve (fixed λ, and λ chosen by grouped CV).

    python benchmarks/bench_fit.py --task ni065_format_pert \
        --metadata '{"n_perturbations": 10, "n_examples": 80}' --out results/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pretrained", default="gemma-3-270m")
    ap.add_argument("--task", default="ni065_format_pert")
    ap.add_argument("--metadata", default='{"n_perturbations": 10, "n_examples": 80}')
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from lm_eval.tasks import TaskManager

    import lm_eval_robust
    from lm_eval_robust.base.offline_models import resolve_pretrained
    from lm_eval_robust.scoring.model import DebiasedHFLM
    from lm_eval_robust.stats.fit.run import FitSettings, fit_features
    from lm_eval_robust.values.features import load_features

    path = resolve_pretrained(args.pretrained)
    md = json.loads(args.metadata)
    tm = TaskManager(include_path=lm_eval_robust.task_dir(), include_defaults=False, metadata=md)
    train = args.task + "_train"
    task = tm.load([train])["tasks"][train]
    task.build_all_requests(rank=0, world_size=1)
    reqs = list(task.instances)
    kw = dict(pretrained=path, batch_size=args.batch_size, device="cpu", prefix_cache=False)
    plain = DebiasedHFLM(**kw)
    eval_s, collect_s, solve_s, cv_s = [], [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        plain.loglikelihood(reqs, disable_tqdm=True)
        eval_s.append(time.perf_counter() - t0)
        with tempfile.TemporaryDirectory() as d:
            lm = DebiasedHFLM(collect_features=d, **kw)
            t0 = time.perf_counter()
            lm.loglikelihood(reqs, disable_tqdm=True)
            collect_s.append(time.perf_counter() - t0)
            feats = load_features(Path(d) / train)
            t0 = time.perf_counter()
            fit_features(feats, FitSettings(lam=1.0))
            solve_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            fit_features(feats, FitSettings(lam=None))
            cv_s.append(time.perf_counter() - t0)
    e, c, s, v = (statistics.median(x) for x in (eval_s, collect_s, solve_s, cv_s))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = len({(r.doc["example_id"], r.doc["pert_id"]) for r in reqs})
    text = (
        f"\n## Fit cost: {train} on {args.pretrained} ({rows} prompts)\n\n"
        f"`python benchmarks/bench_fit.py --task {args.task} --metadata '{args.metadata}'`\n\n"
        "| step | median s | ratio vs one evaluation pass |\n|---|---:|---:|\n"
        f"| evaluation pass (plain) | {e:.1f} | 1.000 |\n"
        f"| collection pass (same forward + features) | {c:.1f} | {c / e:.3f} |\n"
        f"| ridge solve, fixed λ (+ radii statistics) | {s:.2f} | {s / e:.3f} |\n"
        f"| ridge with λ by 5-fold grouped CV | {v:.2f} | {v / e:.3f} |\n"
        f"| **collection + fixed-λ fit** | {c + s:.1f} | **{(c + s) / e:.3f}** |\n"
        f"| collection + CV fit | {c + v:.1f} | {(c + v) / e:.3f} |\n\n"
        f"Median of {args.repeats} alternating repeats; peak RSS {peak:.0f} MB.\n"
    )
    print(text)
    if args.out:
        with Path(args.out).open("a", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
