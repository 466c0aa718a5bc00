"""debiased_hf vs the harness's hf on the same perturbed-task requests: wall time and parity.

All models are loaded once; the request set is scored by each in alternating repeats inside one
process, so machine noise hits all alike, and ratios of medians are reported, with the largest
absolute log-likelihood difference to hf and the agreement of predicted labels.

    python benchmarks/bench_loglikelihood.py --pretrained gemma-3-270m --task ni065_format_pert \
        --metadata '{"n_perturbations": 4}' --limit 64 --repeats 3 --out results/benchmarks.md

A variant named ``NAME@DTYPE`` (``debiased_hf@float32``) loads in that dtype instead of --dtype;
``--variants debiased_hf@bfloat16,debiased_hf@float32`` measures what half precision buys on this
CPU (nothing without native bf16 instructions: it is emulated).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from _common import first_top_label, task_requests

VARIANTS = {
    "hf": ("hf", {}),
    "debiased_hf": ("debiased_hf", {"prefix_cache": True}),
    "debiased_hf_nocache": ("debiased_hf", {"prefix_cache": False}),
    # the same, scoring labels from the model's own half-precision logits (before float32
    # label scores): the float32 recomputation's cost is the ratio to debiased_hf_nocache
    "debiased_hf_nocache_native_scores": ("debiased_hf", {"prefix_cache": False}),
}


class _NativeScores:
    """Label scores from the model's own logits (no float32 recomputation)."""

    def scores(self, logits: Any, hidden: Any) -> Any:
        return logits


def _load(variant: str, path: str, kw: dict[str, Any], correction: str | None) -> Any:
    from lm_eval.models.huggingface import HFLM

    from lm_eval_robust.scoring.model import DebiasedHFLM

    variant, _, dtype = variant.partition("@")  # "name@float32": that variant in that dtype
    if dtype:
        kw = {**kw, "dtype": dtype}
    if variant == "raw_forward":
        return RawForward(DebiasedHFLM(pretrained=path, **kw, prefix_cache=False), kw["batch_size"])
    if variant.endswith("+correction"):
        kind, extra = VARIANTS[variant.removesuffix("+correction")]
        extra = {**extra, "correction": correction}
    else:
        kind, extra = VARIANTS[variant]
    cls = HFLM if kind == "hf" else DebiasedHFLM
    lm = cls(pretrained=path, **kw, **extra)
    if variant.startswith("debiased_hf_nocache_native_scores"):
        lm._label_scorer = _NativeScores()
    return lm


class RawForward:
    """The limit on this machine: one batched forward per distinct input, left-padded with an
    attention mask, ``logits_to_keep`` = the scored positions, nothing else (no harness)."""

    def __init__(self, lm: Any, batch_size: int) -> None:
        self.lm, self.batch_size = lm, batch_size
        self.model = lm.model

    def loglikelihood(self, reqs: list[Any], disable_tqdm: bool = True) -> list[tuple[float, bool]]:
        import torch

        enc = [self.lm._encode_pair(*r.args) for r in reqs]
        inputs = sorted({tuple((c + t)[:-1]) for c, t in enc}, key=len)
        n_keep = max(len(t) for _, t in enc)
        out: dict[tuple[int, ...], torch.Tensor] = {}
        pad = self.lm.tokenizer.pad_token_id or 0
        for s in range(0, len(inputs), self.batch_size):
            chunk = inputs[s : s + self.batch_size]
            width = max(map(len, chunk))
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, x in enumerate(chunk):
                ids[i, width - len(x) :] = torch.tensor(x)
                mask[i, width - len(x) :] = 1
            with torch.no_grad():
                logits = self.model(
                    input_ids=ids, attention_mask=mask, logits_to_keep=n_keep
                ).logits
            lp = torch.log_softmax(logits.float(), dim=-1)
            for i, x in enumerate(chunk):
                out[x] = lp[i]
        res = []
        for c, t in enc:
            lp = out[tuple((c + t)[:-1])][-len(t) :]
            res.append((float(lp[range(len(t)), t].sum()), True))
        return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pretrained", default="gemma-3-270m")
    ap.add_argument("--task", default="ni065_format_pert")
    ap.add_argument("--metadata", default='{"n_perturbations": 4}')
    ap.add_argument("--limit", type=int, default=64, help="docs (0: all)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--variants", default="hf,debiased_hf,debiased_hf_nocache")
    ap.add_argument("--correction", default=None, help="for variants named '...+correction'")
    ap.add_argument("--out", default=None, help="append a Markdown section to this file")
    args = ap.parse_args()

    from lm_eval_robust.base.offline_models import resolve_pretrained

    path = resolve_pretrained(args.pretrained)
    md = json.loads(args.metadata)
    reqs = task_requests(args.task, md, args.limit)
    kw = dict(batch_size=args.batch_size, dtype=args.dtype, device="cpu")
    names = args.variants.split(",")
    models = {n: _load(n, path, kw, args.correction) for n in names}
    times: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, list[tuple[float, bool]]] = {}
    for _ in range(args.repeats):
        for name, lm in models.items():
            if hasattr(lm, "_prefix_cache") and lm._prefix_cache is not None:
                lm._prefix_cache.clear()  # every repeat pays for its prefixes
            t0 = time.perf_counter()
            outputs[name] = lm.loglikelihood(reqs, disable_tqdm=True)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    ref = names[0]
    preds = {n: first_top_label(reqs, outputs[n]) for n in names}
    docs = len(preds[ref])
    rows = []
    for n in names:
        diff = max(abs(a[0] - b[0]) for a, b in zip(outputs[ref], outputs[n], strict=True))
        agree = sum(preds[ref][d] == preds[n][d] for d in preds[ref]) / docs
        rows.append(
            {
                "variant": n,
                "median_s": med[n],
                "prompts_per_s": docs / med[n],
                "ratio_vs_" + ref: med[n] / med[ref],
                "max_abs_loglik_diff_vs_" + ref: diff,
                "pred_agreement_vs_" + ref: agree,
            }
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "model": args.pretrained,
        "dtype": ",".join(sorted({str(m.model.dtype) for m in models.values()})),
        "task": args.task,
        "metadata": md,
        "requests": len(reqs),
        "docs": docs,
        "rows": rows,
        "peak_rss_mb_all_models": peak_mb,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        cmd = (
            f"python benchmarks/bench_loglikelihood.py --pretrained {args.pretrained} --task "
            f"{args.task} --metadata '{args.metadata}' --limit {args.limit} --batch-size "
            f"{args.batch_size} --repeats {args.repeats} --variants {args.variants}"
            + (f" --correction {args.correction}" if args.correction else "")
        )
        lines = [
            f"\n## {args.task} on {args.pretrained} ({result['dtype']}): {docs} prompts, "
            f"{len(reqs)} requests\n",
            f"`{cmd}`\n",
            f"| variant | median s | prompts/s | time ratio vs {ref} | max abs loglik diff | "
            "same predicted label |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            vals = list(r.values())
            lines.append(
                f"| {vals[0]} | {vals[1]:.2f} | {vals[2]:.2f} | {vals[3]:.3f} | {vals[4]:.2e} | "
                f"{vals[5]:.1%} |"
            )
        lines.append(
            f"\nMedian of {args.repeats} alternating repeats in one process; peak RSS with all "
            f"models loaded {peak_mb:.0f} MB.\n"
        )
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
