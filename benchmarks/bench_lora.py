"""Fit cost of debiasing vs LoRA on the same train prompts, p_recover of each, peak memory.

Every step runs in a fresh subprocess (one model load each), so its peak RSS
(``ru_maxrss``) is its own; the timed part excludes the model load. Steps, in order:

* ``eval``: one plain evaluation pass over the train prompts (timed: the unit of cost), then
  the test prompts (base predictions);
* ``fit``: feature collection over the same train prompts + ridge solve (λ by grouped CV);
* ``debiased_eval``: the test prompts with that correction;
* ``lora``: LoRA training on the same train prompts (layer 8/36 depth, ``mlp.up_proj``);
* ``lora_eval``: the test prompts with the adapter.

p_recover = (BAC_pert(method) − BAC_pert(base)) / (BAC_clean(base) − BAC_pert(base)), in percent
(the paper's Section 5.1.2), on the test split.

    python benchmarks/bench_lora.py --task ni1284_format_pert \
        --metadata '{"n_perturbations": 4, "n_examples": 60, "text_scope": "query"}' \
        --out results/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STEPS = ("eval", "fit", "debiased_eval", "lora", "lora_eval")


def _requests(task: str, md: dict[str, Any]) -> list[Any]:
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    tm = TaskManager(include_path=lm_eval_robust.task_dir(), include_defaults=False, metadata=md)
    t = tm.load([task])["tasks"][task]
    t.build_all_requests(rank=0, world_size=1)
    return list(t.instances)


def _bac(reqs: list[Any], results: list[tuple[float, bool]]) -> dict[str, float]:
    from lm_eval_robust.stats.classification import bac_clean, bac_pert, maj_share_pert
    from lm_eval_robust.tasks.ni import process_results

    by_doc: dict[int, list[tuple[int, tuple[float, bool]]]] = {}
    docs = {}
    for req, res in zip(reqs, results, strict=True):
        by_doc.setdefault(int(req.doc_id), []).append((int(req.idx), res))
        docs[int(req.doc_id)] = req.doc
    items = [
        process_results(docs[d], [r for _, r in sorted(by_doc[d])])["robust_bac_pert"]
        for d in by_doc
    ]
    return {
        "bac_clean": 100 * bac_clean(items),
        "bac_pert": 100 * bac_pert(items),
        "maj_share_pert": 100 * maj_share_pert(items),
    }


def _step(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from lm_eval_robust.base.offline_models import resolve_pretrained
    from lm_eval_robust.scoring.model import DebiasedHFLM

    md = json.loads(args.metadata)
    work = Path(args.work)
    kw = dict(pretrained=resolve_pretrained(args.pretrained), batch_size=args.batch_size)
    kw["device"] = "cpu"
    train = _requests(args.task + "_train", md)
    test = _requests(args.task, md)
    out: dict[str, Any] = {"step": name}
    if name == "eval":
        lm = DebiasedHFLM(**kw)
        t0 = time.perf_counter()
        lm.loglikelihood(train, disable_tqdm=True)
        out["seconds"] = time.perf_counter() - t0
        out["test"] = _bac(test, lm.loglikelihood(test, disable_tqdm=True))
    elif name == "fit":
        from lm_eval_robust.scoring.correction import save
        from lm_eval_robust.stats.fit.run import FitSettings, fit_features
        from lm_eval_robust.values.features import load_features

        lm = DebiasedHFLM(collect_features=str(work / "features"), **kw)
        t0 = time.perf_counter()
        lm.loglikelihood(train, disable_tqdm=True)
        out["collect_seconds"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        corr = fit_features(load_features(work / "features" / f"{args.task}_train"), FitSettings())
        out["solve_seconds"] = time.perf_counter() - t1
        out["seconds"] = time.perf_counter() - t0
        save(corr, work / "corrections" / f"{args.task}.safetensors")
    elif name == "lora":
        from lm_eval_robust.scoring.lora import save_adapter
        from lm_eval_robust.scoring.lora_train import LoraSettings, train_lora, train_rows

        lm = DebiasedHFLM(**kw)
        t0 = time.perf_counter()
        rows = train_rows(lm, args.task + "_train", md)
        settings = LoraSettings(
            lr=args.lora_lr,
            epochs=args.lora_epochs,
            rank=args.lora_rank,
            batch_size=args.lora_batch_size,
        )
        adapter = train_lora(lm.model, lm.tokenizer, rows, settings, args.task, progress=False)
        out["seconds"] = time.perf_counter() - t0
        out["epoch_loss"] = adapter.stats["epoch_loss"]
        out["module"] = adapter.module
        save_adapter(adapter, work / "lora" / f"{args.task}.safetensors")
    else:
        extra = (
            {"correction": str(work / "corrections")}
            if name == "debiased_eval"
            else {"lora": str(work / "lora")}
        )
        lm = DebiasedHFLM(**kw, **extra)
        t0 = time.perf_counter()
        out["test"] = _bac(test, lm.loglikelihood(test, disable_tqdm=True))
        out["seconds"] = time.perf_counter() - t0
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["n_train_prompts"] = len({(r.doc["example_id"], r.doc["pert_id"]) for r in train})
    out["n_test_prompts"] = len({(r.doc["example_id"], r.doc["pert_id"]) for r in test})
    return out


def _p_recover(base: dict[str, float], other: dict[str, float]) -> float:
    damage = base["bac_clean"] - base["bac_pert"]
    return (
        float("nan")
        if abs(damage) < 1e-9
        else 100 * (other["bac_pert"] - base["bac_pert"]) / damage
    )


def _table(res: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    e, f, lo = res["eval"], res["fit"], res["lora"]
    base = e["test"]
    rows_test = [("base", base)]
    rows_test += [
        ("debias (ridge)", res["debiased_eval"]["test"]),
        ("LoRA", res["lora_eval"]["test"]),
    ]
    cmd = (
        f"python benchmarks/bench_lora.py --task {args.task} --metadata '{args.metadata}' "
        f"--lora-lr {args.lora_lr} --lora-epochs {args.lora_epochs} --lora-rank {args.lora_rank} "
        f"--lora-batch-size {args.lora_batch_size}"
    )
    lines = [
        f"\n## Fit cost vs LoRA: {args.task} on {args.pretrained} "
        f"({e['n_train_prompts']} train prompts, {e['n_test_prompts']} test prompts)\n",
        f"`{cmd}`\n",
        "Each step in a fresh subprocess, one after another in one run; seconds exclude the model "
        f"load. LoRA: rank {args.lora_rank}, {lo['module']}, lr {args.lora_lr}, "
        f"{args.lora_epochs} epoch(s), batch {args.lora_batch_size}, class-balanced label "
        "cross-entropy "
        f"(epoch losses {', '.join(f'{x:.3f}' for x in lo['epoch_loss'])}).\n",
        "| step (same train prompts) | s | ratio vs one evaluation pass |",
        "|---|---:|---:|",
        f"| evaluation pass | {e['seconds']:.1f} | 1.00 |",
        f"| feature collection + ridge (λ by CV) | {f['seconds']:.1f} "
        f"(solve {f['solve_seconds']:.2f}) | {f['seconds'] / e['seconds']:.2f} |",
        f"| LoRA training | {lo['seconds']:.1f} | {lo['seconds'] / e['seconds']:.2f} |",
        "",
        f"**LoRA training / (collection + fit) = {lo['seconds'] / f['seconds']:.1f}×**\n",
        "| method (test split) | BAC clean | BAC pert | maj. share pert | p_recover |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, t in rows_test:
        pr = "–" if name == "base" else f"{_p_recover(base, t):.1f}"
        lines.append(
            f"| {name} | {t['bac_clean']:.1f} | {t['bac_pert']:.1f} | {t['maj_share_pert']:.1f} "
            f"| {pr} |"
        )
    lines += [
        "",
        "Peak memory (RSS of the step's own process, model load included):",
        "",
        "| step | peak RSS MB |",
        "|---|---:|",
    ]
    names = {
        "eval": "plain evaluation",
        "debiased_eval": "debiased evaluation (correction)",
        "fit": "fit (feature collection + ridge)",
        "lora": "LoRA training",
        "lora_eval": "LoRA evaluation",
    }
    lines += [f"| {names[s]} | {res[s]['peak_rss_mb']:.0f} |" for s in STEPS]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pretrained", default="gemma-3-270m")
    ap.add_argument("--task", default="ni1284_format_pert")
    ap.add_argument(
        "--metadata", default='{"n_perturbations": 4, "n_examples": 60, "text_scope": "query"}'
    )
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lora-lr", type=float, default=2e-3)
    ap.add_argument("--lora-epochs", type=int, default=1)
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--lora-batch-size", type=int, default=4)
    ap.add_argument("--out", default=None)
    ap.add_argument("--step", choices=STEPS, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        print("RESULT " + json.dumps(_step(args.step, args)), flush=True)
        return
    res: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as work:
        for step in STEPS:
            cmd = [sys.executable, __file__, *sys.argv[1:], "--step", step, "--work", work]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                sys.exit(f"step {step} failed:\n{proc.stderr[-3000:]}")
            res[step] = json.loads(line[len("RESULT ") :])
            print(json.dumps(res[step]), flush=True)
    text = _table(res, args)
    print(text)
    if args.out:
        with Path(args.out).open("a", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
