"""Certificates and spreads of the committed Qwen2.5-Coder 1.5B ni220 runs, redone from their
logged samples (no model run): K = 20 (../qwen2.5-coder-1.5b_ni220_all/fp32, 99 test examples)
and K = 200 (../qwen2.5-coder-1.5b_ni220_k200, 21 test examples).

Per run: the committed single-split plug-in rates (seed 0, as the reports print them); the
finite-sample certificate and the plug-in over 50 estimation/held-back splits with their
held-back check; on the K = 200 base run, both rules on random K-subsets of each example's
variants, checked against the example's accuracy on the variants outside the subset; the text
kinds' spread against its permutation null.

Run from the repository root:
    python results/qwen2.5-coder-1.5b_ni220_certificates/run.py
writes summary.json and result.md beside this file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from lm_eval_robust.stats.cert_splits import split_flags, summarize
from lm_eval_robust.stats.certificates import CertConfig, certify
from lm_eval_robust.stats.margins import MarginTable
from lm_eval_robust.stats.spread_null import spread_null
from lm_eval_robust.values.pairing import load_run

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent
PHI, ALPHA, SPLITS, BOOT = 0.1, 0.05, 50, 2000
RUNS = {
    20: {
        "base": "qwen2.5-coder-1.5b_ni220_all/fp32/base_run",
        "ridge": "qwen2.5-coder-1.5b_ni220_all/fp32/base_run_ridge",
        "batch calibration": "qwen2.5-coder-1.5b_ni220_all/fp32/base_run_batch_calibration",
        "clean calibration": "qwen2.5-coder-1.5b_ni220_all/fp32/base_run_clean_calibration",
    },
    200: {
        "base": "qwen2.5-coder-1.5b_ni220_k200/base_run",
        "ridge": "qwen2.5-coder-1.5b_ni220_k200/run_ridge",
        "batch calibration": "qwen2.5-coder-1.5b_ni220_k200/run_batch_calibration",
        "clean calibration": "qwen2.5-coder-1.5b_ni220_k200/run_clean_calibration",
    },
}
SUB_K = (4, 10, 20, 57, 100)
SUB_DRAWS = 20


def items_of(rel: str) -> list[dict]:
    run = load_run(RESULTS / rel)
    (task,) = run.tasks
    return [it for it in run.tasks[task].item_list() if it.get("ll") is not None]


def nan_to_none(x: object) -> object:
    if isinstance(x, dict):
        return {k: nan_to_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [nan_to_none(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, (np.integer, np.bool_)):
        return x.item()
    return x


def subset(table: MarginTable, keep: np.ndarray) -> MarginTable:
    return MarginTable(
        example_ids=table.example_ids,
        gold=table.gold,
        clean_ll=table.clean_ll,
        has_clean=table.has_clean,
        var_example=table.var_example[keep],
        var_pert_id=table.var_pert_id[keep],
        var_ll=table.var_ll[keep],
    )


def subsample_check(table: MarginTable, k: int) -> dict[str, dict[str, float]]:
    """Both rules on random K-subsets; the truth proxy is the accuracy outside the subset."""
    rng = np.random.default_rng(k)
    credit = table.var_correct()
    e = table.n_examples
    out: dict[str, list[tuple[float, int, int]]] = {}
    for _ in range(SUB_DRAWS):
        keys = rng.random(table.var_example.size)
        order = np.lexsort((keys, table.var_example))
        counts = table.variant_counts()
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size) - starts[table.var_example[order]]
        keep = rank < k
        outside = np.bincount(table.var_example[~keep], credit[~keep], e) / np.maximum(
            np.bincount(table.var_example[~keep], minlength=e), 1
        )
        flags = split_flags(subset(table, keep), n_splits=1, phi=PHI, alpha=ALPHA)
        idx = np.flatnonzero(table.has_clean & (counts >= 2))
        for rule, f in flags.items():
            cert = f.certified[0]
            wrong = int((cert & (outside[idx] < 1 - PHI)).sum())
            out.setdefault(rule, []).append((float(cert.mean()) if f.available else math.nan,
                                             int(cert.sum()) if f.available else 0, wrong))
    res = {}
    for rule, vals in out.items():
        rates = [v[0] for v in vals]
        n_cert = sum(v[1] for v in vals)
        res[rule] = {
            "rate": float(np.mean(rates)) if all(math.isfinite(r) for r in rates) else math.nan,
            "n_certified": n_cert,
            "wrong_share": sum(v[2] for v in vals) / n_cert if n_cert else math.nan,
        }
    return res


def main() -> None:
    summary: dict[str, object] = {"phi": PHI, "alpha": ALPHA, "n_splits": SPLITS, "runs": {}}
    for k, runs in RUNS.items():
        for name, rel in runs.items():
            items = items_of(rel)
            table = MarginTable.from_items(items)
            old = certify(table, CertConfig())  # the committed reports' single split, seed 0
            flags = split_flags(table, SPLITS, PHI, ALPHA)
            rules = {r: summarize([f], PHI, BOOT, 0.95, 0).as_dict() for r, f in flags.items()}
            entry: dict[str, object] = {
                "source": rel,
                "k": k,
                "n_examples": table.n_examples,
                "old_plugin_c_seed0": old.rate("c"),
                "old_plugin_h_seed0": old.rate("h"),
                "rules": rules,
            }
            if name == "base":
                null = spread_null(items, 2000, seed=0)
                entry["spread"] = {
                    "observed": float(null.observed[3]),
                    **null.as_dict(),
                }
            summary["runs"][f"K{k} {name}"] = entry  # type: ignore[index]
    base200 = MarginTable.from_items(items_of(RUNS[200]["base"]))
    summary["subsample_k200_base"] = {str(k): subsample_check(base200, k) for k in SUB_K}
    doc = nan_to_none(summary)
    (HERE / "summary.json").write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    (HERE / "result.md").write_text(render(doc))


def pct(x: object, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{100 * float(x):+.1f}" if signed else f"{100 * float(x):.1f}"  # type: ignore[arg-type]


def render(s: dict) -> str:
    lines = [
        "# ni220, Qwen2.5-Coder 1.5B: certificates and spread redone (generated by run.py)",
        "",
        f"φ = {s['phi']}, α = {s['alpha']}; {s['n_splits']} estimation/held-back splits. Percent.",
        "",
        "| run | K | examples | old plug-in p_C / p_H (one split) | plug-in p_C over splits "
        "[95 % CI] (range) | plug-in p_C held-back acc. certified / uncertified | exact "
        "(finite-sample) | exact held-back acc. certified / uncertified | verdicts (exact; "
        "plug-in p_C) |",
        "|---|---:|---:|---|---|---|---|---|---|",
    ]
    for name, r in s["runs"].items():
        pc, ex = r["rules"]["plugin_c"], r["rules"]["exact"]
        exact = (
            f"{pct(ex['rate'])} [{pct(ex['rate_low'])}, {pct(ex['rate_high'])}] "
            f"({pct(ex['split_min'])}–{pct(ex['split_max'])})"
            if ex["available"]
            else ex["reason"]
        )
        verdict_e = "n/a" if not ex["available"] else _verdict(ex)
        lines.append(
            f"| {name} | {r['k']} | {r['n_examples']} | {pct(r['old_plugin_c_seed0'])} / "
            f"{pct(r['old_plugin_h_seed0'])} | {pct(pc['rate'])} [{pct(pc['rate_low'])}, "
            f"{pct(pc['rate_high'])}] ({pct(pc['split_min'])}–{pct(pc['split_max'])}) | "
            f"{pct(pc['acc_certified'])} / {pct(pc['acc_uncertified'])} | {exact} | "
            f"{pct(ex['acc_certified'])} / {pct(ex['acc_uncertified'])} | {verdict_e}; "
            f"{_verdict(pc)} |"
        )
    lines += [
        "",
        "## Subsampling the K = 200 base run",
        "",
        f"Each example's variants cut to a random K-subset ({SUB_DRAWS} draws); the rule "
        "certifies from the subset's estimation half; *wrong* = certified examples whose "
        "accuracy on the variants outside the subset (at least 100) is below 1 − φ.",
        "",
        "| K | plug-in p_C: certified / wrong | plug-in p_H: certified / wrong | exact: "
        "certified / wrong |",
        "|---:|---|---|---|",
    ]
    for k, rules in s["subsample_k200_base"].items():
        cells = []
        for rule in ("plugin_c", "plugin_h", "exact"):
            v = rules[rule]
            cells.append(
                "n/a (K ≥ 57)"
                if v["rate"] is None
                else f"{pct(v['rate'])} / {pct(v['wrong_share'])}"
            )
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Spread of the text-perturbation kinds against its permutation null",
        "",
        "| run | spread | with no kind effect (mean, 95th pct.) | p | within noise |",
        "|---|---:|---|---:|---|",
    ]
    for name, r in s["runs"].items():
        sp = r.get("spread")
        if sp:
            lines.append(
                f"| {name} | {pct(sp['observed'])} | {pct(sp['fmt_spread_null_mean'])}, "
                f"{pct(sp['fmt_spread_null_q95'])} | {_p(sp['fmt_spread_p'])} | "
                f"{'yes' if sp['spread_within_noise'] else 'no'} |"
            )
    return "\n".join(lines) + "\n"


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _verdict(r: dict) -> str:
    if not r["available"]:
        return "n/a"
    if r["n_certified"] == 0:
        return "nothing certified"
    if r["flagged"]:
        return "fails its promise"
    head = "selects" if r["selects"] else "no selection shown"
    return head + ("; promise in doubt" if r["doubtful"] else "")


if __name__ == "__main__":
    main()
