"""How far do log-likelihoods move with batch size, padding and the prefix cache?

The same requests of one perturbed task are scored by

* ``hf@N``: the harness's own ``--model hf`` at batch size N (its padding and batch composition
  change with N; this is the envelope every half-precision evaluation already lives in);
* ``plain@N``: ``debiased_hf`` without the shared-prefix cache, N prompts per forward;
* ``cached@N``: ``debiased_hf`` with the shared-prefix cache, N prompts per forward.

For each pair it reports the largest absolute log-likelihood difference and the share of prompts
whose top label changes (a prompt counts as changed when its set of top labels differs, so an exact
tie that becomes a win counts). ``debiased_hf`` scores labels in float32 from the head's input;
``hf`` takes them from the model's own logits, so ``plain@1 vs hf@1`` is the float32 scoring's
own distance from the stock model.

    python benchmarks/bench_envelope.py --task ni065_format_pert \
        --metadata '{"n_perturbations": 10, "n_examples": 40}' --out results/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from _common import task_requests, top_labels

DEFAULT_VARIANTS = "hf@1,hf@4,hf@16,plain@1,plain@16,cached@16"
DEFAULT_PAIRS = (
    "hf@4:hf@1,hf@16:hf@1,plain@16:plain@1,cached@16:plain@1,cached@16:plain@16,"
    "plain@1:hf@1,cached@16:hf@1"
)


def _load(variant: str, path: str, dtype: str) -> Any:
    from lm_eval.models.huggingface import HFLM

    from lm_eval_robust.scoring.model import DebiasedHFLM

    kind, _, size = variant.partition("@")
    n = int(size)
    if kind == "hf":
        return HFLM(pretrained=path, batch_size=n, dtype=dtype, device="cpu")
    if kind not in ("plain", "cached"):
        raise SystemExit(f"unknown variant {variant!r}: use hf@N, plain@N or cached@N")
    return DebiasedHFLM(
        pretrained=path,
        dtype=dtype,
        device="cpu",
        fast_batch_size=n,
        prefix_cache=kind == "cached",
    )


def compare(
    reqs: list[Any], a: list[tuple[float, bool]], b: list[tuple[float, bool]]
) -> dict[str, float]:
    diff = max(abs(x[0] - y[0]) for x, y in zip(a, b, strict=True))
    ta, tb = top_labels(reqs, a), top_labels(reqs, b)
    changed = sum(ta[d] != tb[d] for d in ta) / len(ta)
    return {"max_abs_ll_diff": diff, "labels_changed": changed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pretrained", default="gemma-3-270m")
    ap.add_argument("--task", default="ni065_format_pert")
    ap.add_argument("--metadata", default='{"n_perturbations": 10, "n_examples": 40}')
    ap.add_argument("--limit", type=int, default=0, help="docs (0: all)")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--pairs", default=DEFAULT_PAIRS, help="A:B,... (A compared with B)")
    ap.add_argument("--out", default=None, help="append a Markdown section to this file")
    ap.add_argument("--json", default=None, help="write the numbers as JSON here")
    args = ap.parse_args()

    from lm_eval_robust.base.offline_models import resolve_pretrained

    path = resolve_pretrained(args.pretrained)
    md = json.loads(args.metadata)
    reqs = task_requests(args.task, md, args.limit)
    outputs: dict[str, list[tuple[float, bool]]] = {}
    dtype = ""
    for name in args.variants.split(","):
        lm = _load(name, path, args.dtype)  # one model at a time keeps memory flat
        dtype = str(lm.model.dtype)
        outputs[name] = lm.loglikelihood(reqs, disable_tqdm=True)
        print(f"{name}: scored {len(reqs)} requests", flush=True)
        del lm
    pairs = [p.split(":") for p in args.pairs.split(",")]
    rows = [{"pair": f"{a} vs {b}", **compare(reqs, outputs[a], outputs[b])} for a, b in pairs]
    n_docs = len({r.doc_id for r in reqs})
    result = {
        "model": args.pretrained,
        "dtype": dtype,
        "task": args.task,
        "metadata": md,
        "prompts": n_docs,
        "requests": len(reqs),
        "rows": rows,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.out:
        cmd = (
            f"python benchmarks/bench_envelope.py --pretrained {args.pretrained} --task "
            f"{args.task} --metadata '{args.metadata}' --limit {args.limit} --dtype {args.dtype} "
            f"--variants {args.variants} --pairs {args.pairs}"
        )
        lines = [
            f"\n## Envelope: {args.task} on {args.pretrained} ({dtype}): {n_docs} prompts, "
            f"{len(reqs)} requests\n",
            f"`{cmd}`\n",
            "| pair | max abs loglik diff | prompts whose top label changed |",
            "|---|---:|---:|",
        ]
        lines += [
            f"| {r['pair']} | {r['max_abs_ll_diff']:.3f} | {r['labels_changed']:.1%} |"
            for r in rows
        ]
        with Path(args.out).open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
