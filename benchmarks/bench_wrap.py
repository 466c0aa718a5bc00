"""A wrapped stock task: debiased_hf vs hf on its prompts, and its clean prompts vs the stock task.

One process, models loaded once, alternating repeats (machine noise hits every variant alike),
ratios of medians:

* ``hf`` and ``debiased_hf`` on every request of the wrapped task (clean and perturbed prompts):
  the throughput ratio debiased_hf / hf;
* ``debiased_hf`` on the wrapped task's clean prompts (round 0) and on the unwrapped stock task's
  requests for the same docs: the wrapper's overhead on the clean prompts (the requests are
  checked to be identical first, so the ratio is the cost of the harness path alone).

    python benchmarks/bench_wrap.py --pretrained gemma-3-270m \
        --task bigbench_date_understanding_multiple_choice --kind text \
        --metadata '{"local_data": "~/lmer-data", "n_examples": 24, "n_perturbations": 3}' \
        --repeats 3 --out results/benchmarks/wrap.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from _common import first_top_label


def _requests(tm: Any, name: str, samples: list[int] | None = None) -> list[Any]:
    task = tm.load([name])["tasks"][name]
    task.set_fewshot_seed(1234)
    task.build_all_requests(samples=samples, rank=0, world_size=1)
    return list(task.instances)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pretrained", default="gemma-3-270m")
    ap.add_argument("--task", default="bigbench_date_understanding_multiple_choice")
    ap.add_argument("--kind", default="text", choices=("text", "format"))
    ap.add_argument("--metadata", default='{"n_examples": 24, "n_perturbations": 3}')
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument(
        "--dtype",
        default="float32",
        help="the dtype of both models (default float32: hf's auto would load the checkpoint's "
        "bf16 while debiased_hf's auto loads float32 on CPU, and the ratio would compare dtypes)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="append a Markdown section to this file")
    args = ap.parse_args()

    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    import lm_eval_robust
    from lm_eval_robust.base.offline_models import resolve_pretrained
    from lm_eval_robust.scoring.model import DebiasedHFLM

    lm_eval_robust.register()
    md = json.loads(args.metadata)
    if "local_data" in md:
        md["local_data"] = str(Path(md["local_data"]).expanduser())
    tm = TaskManager(metadata=md)
    wrapped_name = f"{args.task}_robust_{args.kind}"
    wrapped = _requests(tm, wrapped_name)
    clean = [r for r in wrapped if r.doc["_lmer"]["pert_id"] == 0]
    stock_docs = sorted({r.doc["_lmer"]["example"] for r in clean})
    stock = _requests(tm, args.task, stock_docs)  # the same docs of the unwrapped task
    same = [(r.args, r.idx) for r in clean] == [(r.args, r.idx) for r in stock]
    if not same:
        raise SystemExit("clean requests differ from the stock task's: nothing to compare")

    path = resolve_pretrained(args.pretrained)
    kw = dict(batch_size=args.batch_size, dtype=args.dtype, device="cpu")
    models = {"hf": HFLM(pretrained=path, **kw), "debiased_hf": DebiasedHFLM(pretrained=path, **kw)}
    runs = {
        "hf, wrapped (all prompts)": ("hf", wrapped),
        "debiased_hf, wrapped (all prompts)": ("debiased_hf", wrapped),
        "debiased_hf, wrapped (clean prompts)": ("debiased_hf", clean),
        "debiased_hf, unwrapped stock task": ("debiased_hf", stock),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    outputs: dict[str, list[tuple[float, bool]]] = {}
    for _ in range(args.repeats):
        for label, (model, reqs) in runs.items():
            lm = models[model]
            cache = getattr(lm, "_prefix_cache", None)
            if cache is not None:
                cache.clear()  # every repeat pays for its prefixes
            t0 = time.perf_counter()
            outputs[label] = lm.loglikelihood(reqs, disable_tqdm=True)
            times[label].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    prompts = {k: len({r.doc_id for r in reqs}) for k, (_, reqs) in runs.items()}
    a, b = "hf, wrapped (all prompts)", "debiased_hf, wrapped (all prompts)"
    c, d = "debiased_hf, wrapped (clean prompts)", "debiased_hf, unwrapped stock task"
    agree = first_top_label(wrapped, outputs[a]) == first_top_label(wrapped, outputs[b])
    result = {
        "model": args.pretrained,
        "dtype": args.dtype,
        "task": wrapped_name,
        "metadata": md,
        "clean_requests_identical_to_stock": same,
        "rows": [
            {
                "run": k,
                "prompts": prompts[k],
                "requests": len(runs[k][1]),
                "median_s": med[k],
                "prompts_per_s": prompts[k] / med[k],
            }
            for k in runs
        ],
        "throughput_ratio_debiased_hf_over_hf": med[a] / med[b],
        "time_ratio_wrapped_clean_over_unwrapped": med[c] / med[d],
        "same_predictions_hf_debiased_hf": agree,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        cmd = (
            f"python benchmarks/bench_wrap.py --pretrained {args.pretrained} --task {args.task} "
            f"--kind {args.kind} --metadata '{args.metadata}' --batch-size {args.batch_size} "
            f"--dtype {args.dtype} "
            f"--repeats {args.repeats}"
        )
        lines = [
            f"\n## {wrapped_name} on {args.pretrained}\n",
            f"`{cmd}`\n",
            "| run | prompts | requests | median s | prompts/s |",
            "|---|---:|---:|---:|---:|",
            *(
                f"| {r['run']} | {r['prompts']} | {r['requests']} | {r['median_s']:.2f} | "
                f"{r['prompts_per_s']:.2f} |"
                for r in result["rows"]
            ),
            "",
            f"- throughput debiased_hf / hf on the wrapped task: "
            f"**{result['throughput_ratio_debiased_hf_over_hf']:.2f}x**",
            f"- debiased_hf time, wrapped clean prompts / unwrapped stock task: "
            f"**{result['time_ratio_wrapped_clean_over_unwrapped']:.3f}** (requests identical: "
            f"{same})",
            f"- same predicted choice, hf vs debiased_hf: {agree}",
            f"\nMedian of {args.repeats} alternating repeats in one process.\n",
        ]
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
