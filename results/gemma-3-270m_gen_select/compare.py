"""Paired comparison of the runs of ``run.sh``: ``python compare.py DIR`` prints markdown.

Per task: the (k, λ) each selection chose, the generation-score CV table of the held-out train
prompts (the squared-error choice marked), and on the test split the exact match of the base
model and of each correction, clean and perturbed, with paired differences and their 95 %
clustered BCa intervals (examples resampled with both of their prompts and every run's answers:
``lm_eval_robust.stats.bootstrap``, 10 000 resamples, seed 0).
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import numpy as np

from lm_eval_robust.scoring.generation.fit import load_layer_correction
from lm_eval_robust.stats.bootstrap import cluster_bootstrap_ci, linear_stat

TASKS = ("triviaqa", "nq_open")
LABELS = ("base", "mse", "generation")


def per_example(run: Path, task: str) -> dict[str, dict[int, tuple[float, str]]]:
    """example id -> pert id -> (EM, first line of the answer) from the run's logged samples."""
    files = sorted(run.glob(f"**/samples_{task}_text_pert_*.jsonl*"))
    if not files:
        raise SystemExit(f"no samples of {task} under {run}")
    out: dict[str, dict[int, tuple[float, str]]] = {}
    for f in files:
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt", encoding="utf-8") as fh:
            for line in fh:
                s = json.loads(line)
                item = s["em_clean"]
                ans = str(s["filtered_resps"][0]).strip().split("\n")[0]
                out.setdefault(str(item["example_id"]), {})[int(item["pert_id"])] = (
                    float(item["scores"]["em"]),
                    ans,
                )
    return out


def fmt_ci(est: float, low: float, high: float) -> str:
    if not math.isfinite(low):
        return f"{100 * est:+.1f} (no interval: no example differs)"
    return f"{100 * est:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def lam_rel_of(corr: object) -> float | None:
    table = corr.stats.get("lambda_table") or []  # type: ignore[attr-defined]
    for row in table:
        if math.isclose(row["lam"], corr.lam, rel_tol=1e-9):  # type: ignore[attr-defined]
            return float(row["lam_rel"])
    return None


def task_section(root: Path, task: str) -> list[str]:
    key = f"{task}_text_pert"
    mse = load_layer_correction(root / "corrections" / "mse" / f"{key}.safetensors")
    gen = load_layer_correction(root / "corrections" / "generation" / f"{key}.safetensors")
    sel = gen.stats["generation_selection"]
    mse_rel = lam_rel_of(mse)
    chosen = sel["chosen"]
    lines = [f"## {task}", ""]
    gen_choice = (
        "none (identity)"
        if chosen == "none"
        else (f"k = {chosen['k']}, λ_rel = {chosen['lam_rel']:g} (λ = {gen.lam:.4g})")
    )
    lines += [
        f"- squared-error CV (`--lam auto`, k = 1): λ_rel = {mse_rel:g} (λ = {mse.lam:.4g}); "
        f"top-1 shift RMS on the train prompts (in sample) "
        f"{mse.stats['top_k_shift_rms_before']:.2f} → {mse.stats['top_k_shift_rms_after']:.2f}",
        "- squared-error CV table (λ_rel: held-out squared error of the top-1 shift): "
        + ", ".join(f"{r['lam_rel']:g}: {r['mse']:.4g}" for r in mse.stats["lambda_table"]),
        f"- generation score (`--select generation`): {gen_choice}; "
        f"{sel['n_generations']} generations, {sel['n_folds']} folds",
        "",
        "Held-out train EM (mean over the folds, percent) per candidate "
        "(* = the squared-error choice):",
        "",
        "| candidate | clean | perturbed | per-fold perturbed | answers changed vs none |",
        "|---|---:|---:|---|---:|",
    ]
    for r in sel["table"]:
        name = "none" if r["k"] is None else f"k={r['k']}, λ_rel={r['lam_rel']:g}"
        if r["k"] == 1 and mse_rel is not None and math.isclose(r["lam_rel"], mse_rel):
            name += " *"
        if chosen != "none" and r["k"] == chosen["k"] and r["lam_rel"] == chosen["lam_rel"]:
            name = f"**{name}** (chosen)"
        elif chosen == "none" and r["k"] is None:
            name = f"**{name}** (chosen)"
        folds = ", ".join(f"{100 * v:.0f}" for v in r["score_pert_folds"])
        changed = f"{r['changed']}/{r['n_prompts']}" if "changed" in r else "n/a"
        lines.append(
            f"| {name} | {100 * r['score_clean']:.1f} | {100 * r['score_pert']:.1f} | {folds} "
            f"| {changed} |"
        )
    runs = {}
    for label in LABELS:
        path = root / "runs" / f"{label}_{task}"
        if label == "generation" and not path.exists() and chosen == "none":
            path = root / "runs" / f"base_{task}"  # the identity correction changes nothing
        runs[label] = per_example(path, task)
    examples = sorted(runs["base"])
    pert_id = max(p for p in runs["base"][examples[0]] if p != 0)
    # per example: EM clean and perturbed of each label, in LABELS order
    suff = np.array(
        [
            [runs[lab][e][0][0] for lab in LABELS] + [runs[lab][e][pert_id][0] for lab in LABELS]
            for e in examples
        ]
    )
    n = len(examples)
    pairs = [("mse", "base"), ("generation", "base"), ("generation", "mse")]
    idx = {lab: i for i, lab in enumerate(LABELS)}

    def derive(tot: np.ndarray) -> np.ndarray:
        w = tot / tot[:, [-1]]
        cols = []
        for off in (0, 3):
            cols += [w[:, off + idx[a]] - w[:, off + idx[b]] for a, b in pairs]
        return np.stack(cols, axis=1)

    with_ones = np.hstack([suff, np.ones((n, 1))])
    ci = cluster_bootstrap_ci(linear_stat(with_ones, derive), n, n_resamples=10_000, seed=0)
    changed = {
        lab: sum(
            runs[lab][e][p][1] != runs["base"][e][p][1] for e in examples for p in (0, pert_id)
        )
        for lab in ("mse", "generation")
    }
    lines += [
        "",
        f"Test split: {n} examples, clean prompt and perturbation {pert_id} (EM, percent):",
        "",
        "| run | clean | perturbed | answers changed vs base |",
        "|---|---:|---:|---:|",
    ]
    for lab in LABELS:
        c = 100 * suff[:, idx[lab]].mean()
        p = 100 * suff[:, 3 + idx[lab]].mean()
        ch = "–" if lab == "base" else f"{changed[lab]}/{2 * n}"
        lines.append(f"| {lab} | {c:.1f} | {p:.1f} | {ch} |")
    lines += [
        "",
        "Paired differences (percentage points, 95 % clustered BCa interval):",
        "",
        "| difference | clean | perturbed |",
        "|---|---|---|",
    ]
    for j, (a, b) in enumerate(pairs):
        c = fmt_ci(*ci.row(j))
        p = fmt_ci(*ci.row(3 + j))
        lines.append(f"| {a} − {b} | {c} | {p} |")
    return [*lines, ""]


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else Path(__file__).parent)
    out = ["# Squared-error CV vs generation score: the choices and the test split", ""]
    for task in TASKS:
        out += task_section(root, task)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
