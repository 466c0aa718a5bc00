"""debiased_hf vs the harness's hf on the same perturbed-task requests: wall time and parity.

Both models are loaded once; the request set is scored by each in alternating repeats inside one
process, so machine noise hits both alike, and the ratio of medians is reported. Also reports the
largest absolute log-likelihood difference and the agreement of predicted labels.

    python benchmarks/bench_loglikelihood.py --pretrained gemma-3-270m --task ni065_format_pert \
        --n-perturbations 4 --limit 64 --repeats 3 --out results/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pretrained", default="gemma-3-270m")
    ap.add_argument("--task", default="ni065_format_pert")
    ap.add_argument("--n-perturbations", type=int, default=4)
    ap.add_argument("--limit", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--out", default=None, help="append a Markdown section to this file")
    args = ap.parse_args()

    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    import lm_eval_robust
    from lm_eval_robust.model import DebiasedHFLM
    from lm_eval_robust.offline_models import resolve_pretrained

    path = resolve_pretrained(args.pretrained)
    tm = TaskManager(
        include_path=lm_eval_robust.task_dir(),
        include_defaults=False,
        metadata={"n_perturbations": args.n_perturbations},
    )
    task = tm.load([args.task])["tasks"][args.task]
    task.build_all_requests(limit=args.limit, rank=0, world_size=1)
    reqs = list(task.instances)
    kw = dict(pretrained=path, batch_size=args.batch_size, dtype=args.dtype, device="cpu")
    models = {"hf": HFLM(**kw), "debiased_hf": DebiasedHFLM(**kw)}
    times: dict[str, list[float]] = {k: [] for k in models}
    outputs: dict[str, list] = {}
    for _ in range(args.repeats):
        for name, lm in models.items():
            t0 = time.perf_counter()
            outputs[name] = lm.loglikelihood(reqs, disable_tqdm=True)
            times[name].append(time.perf_counter() - t0)
    diff = max(abs(a[0] - b[0]) for a, b in zip(outputs["hf"], outputs["debiased_hf"], strict=True))
    # predicted label per doc from each model's choice log-likelihoods
    by_doc: dict[str, dict[int, dict[int, float]]] = {"hf": {}, "debiased_hf": {}}
    for name in by_doc:
        for req, (ll, _) in zip(reqs, outputs[name], strict=True):
            by_doc[name].setdefault(req.doc_id, {})[req.idx] = ll
    preds = {n: {d: max(v, key=v.get) for d, v in docs.items()} for n, docs in by_doc.items()}
    agree = sum(preds["hf"][d] == preds["debiased_hf"][d] for d in preds["hf"]) / len(preds["hf"])
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "model": args.pretrained,
        "dtype": str(models["hf"].model.dtype),
        "task": args.task,
        "requests": len(reqs),
        "docs": len(preds["hf"]),
        "median_s": med,
        "ratio_debiased_over_hf": med["debiased_hf"] / med["hf"],
        "max_abs_loglik_diff": diff,
        "pred_agreement": agree,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        cmd = (
            f"python benchmarks/bench_loglikelihood.py --pretrained {args.pretrained} --task "
            f"{args.task} --n-perturbations {args.n_perturbations} --limit {args.limit} "
            f"--batch-size {args.batch_size} --repeats {args.repeats}"
        )
        text = (
            f"\n## debiased_hf vs hf: {args.task}, {args.pretrained} ({result['dtype']})\n\n"
            f"`{cmd}`\n\n| | hf | debiased_hf |\n|---|---:|---:|\n"
            f"| median wall time (s), {len(reqs)} requests / {len(preds['hf'])} docs | "
            f"{med['hf']:.2f} | {med['debiased_hf']:.2f} |\n\n"
            f"- wall-time ratio debiased_hf / hf: **{result['ratio_debiased_over_hf']:.3f}** "
            f"(median of {args.repeats} alternating repeats)\n"
            f"- largest |log-likelihood difference|: {diff:.2e}; predicted labels agree on "
            f"{agree:.1%} of docs\n"
        )
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
