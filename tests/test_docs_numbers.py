"""Numbers quoted in README.md, docs/ and the results READMEs, read from the committed files they
come from: a redone run cannot leave a stale number behind.

Each claim renders the sentence fragment a document quotes from the committed JSON (report,
leaderboard, sweep, certificate summary) and checks it is in the document (whitespace
normalised, so line breaks do not matter).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from functools import cache
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest

from lm_eval_robust.stats.spread_null import examples_needed, noise_spread

ROOT = Path(__file__).resolve().parents[1]
R = ROOT / "results"
NI220 = "qwen2.5-coder-1.5b_ni220_all/fp32/report/report.json"
NI220_HOLD = "qwen2.5-coder-1.5b_ni220_all/fp32/report_holdout/report.json"
NI1286 = "qwen2.5-coder-1.5b_ni1286_all/fp32/report/report.json"
TARGETS = "qwen2.5-coder-1.5b_targets_all/fp32/report/report.json"
CHAT = "qwen2.5-coder-1.5b_chat_all/fp32/report/report.json"
LB = "leaderboard/table/leaderboard.json"
CERTS = "qwen2.5-coder-1.5b_ni220_certificates/summary.json"
SWEEP = "qwen2.5-coder-1.5b_generation/sweep.json"
CHAT_T = "qwen2.5-coder-1.5b_chat_targets/report/report.json"
K200 = "qwen2.5-coder-1.5b_ni220_k200/report/report.json"


@cache
def load(rel: str) -> Any:
    return json.loads((R / rel).read_text(encoding="utf-8"))


@cache
def text(rel: str) -> str:
    return " ".join((ROOT / rel).read_text(encoding="utf-8").split())


def n(x: float, signed: bool = False, scale: float = 1.0) -> str:
    """One decimal, with the typographic minus the docs use."""
    v = round(scale * x, 1) + 0.0
    s = f"{v:+.1f}" if signed else f"{v:.1f}"
    return s.replace("-", "−")


def ci(
    cell: dict[str, float], signed: bool = False, scale: float = 1.0, bounds: bool = False
) -> str:
    """``value [low, high]``; ``signed`` puts a sign on the value (the reports' style), and
    ``bounds`` on the interval's ends too (the leaderboard's paired differences)."""
    value = cell["value"] if "value" in cell else cell["diff"]  # a paired difference
    sb = signed and bounds
    return f"{n(value, signed, scale)} [{n(cell['low'], sb, scale)}, {n(cell['high'], sb, scale)}]"


def task(rel: str, run: str, name: str) -> dict[str, Any]:
    (hit,) = [t for t in load(rel)["tasks"] if t["run"] == run and t["task"] == name]
    return hit["metrics"]


def pair(rel: str, other: str, name: str) -> dict[str, Any]:
    (hit,) = [p for p in load(rel)["pairs"] if p["other"] == other and p["task"] == name]
    return hit["metrics"]


def lb_row(model: str, kind: str, name: str = "mean") -> dict[str, Any]:
    (hit,) = [
        r for r in load(LB)["rows"] if (r["model"], r["kind"], r["task"]) == (model, kind, name)
    ]
    return hit


def lb_pair(kind: str, measure: str, a: str, b: str) -> dict[str, Any]:
    (hit,) = [
        p
        for p in load(LB)["comparison"]["pairs"]
        if (p["kind"], p["measure"], p["model_a"], p["model_b"]) == (kind, measure, a, b)
    ]
    return hit


def cert(run: str, rule: str) -> dict[str, Any]:
    return load(CERTS)["runs"][run]["rules"][rule]


def pct(x: float) -> str:
    return n(100 * x)


def rate_ci(c: dict[str, Any]) -> str:
    return f"{pct(c['rate'])} % [{pct(c['rate_low'])}, {pct(c['rate_high'])}]"


def hp(p: float) -> str:
    return f"{p:.3f}"


T220 = "ni220_text_pert"
SMOL, GEMMA, Q05, Q15 = "SmolLM2 135M", "Gemma 3 270M", "Qwen2.5-Coder 0.5B", "Qwen2.5-Coder 1.5B"


def _readme() -> list[str]:
    drop = task(NI220, "base", T220)["delta_drop"]
    ridge = pair(NI220, "debiased", T220)
    worst = lb_pair("format", "bac_worst", GEMMA, Q15)
    dd = lb_pair("format", "delta_drop", GEMMA, Q15)
    n_ex = [t["n_examples"] for t in load(NI220)["tasks"] if t["run"] == "base"]
    return [
        f"ni220 with text perturbations ({n_ex[0]} test examples)",
        f"cost the base model {n(-drop['value'])} points of BAC [{n(drop['low'])}, "
        f"{n(drop['high'])}]",
        f"raises perturbed BAC by {n(ridge['delta_pert']['value'])} points "
        f"[{n(ridge['delta_pert']['low'])}, {n(ridge['delta_pert']['high'])}] and lowers clean "
        f"BAC by {n(-ridge['delta_clean']['value'])} [{n(ridge['delta_clean']['low'])}, "
        f"{n(ridge['delta_clean']['high'])}]",
        f"({ci(task(NI220, 'debiased', T220)['delta_drop'])}) part is repair",
        f"worst-case BAC is {ci(worst, scale=100)} with Holm-adjusted p = {hp(worst['p_holm'])}",
        f"gives {ci(dd, signed=True, scale=100, bounds=True)}, Holm p = {hp(dd['p_holm'])}",
    ]


def _guide() -> list[str]:
    ridge, batch = pair(NI220, "debiased", T220), pair(NI220, "batch_cal", T220)
    hold = "ni220_text_pert_holdout"
    t1297 = "ni1297_text_pert"
    chat = {k: pair(CHAT, k, t1297) for k in ("debiased", "ridge_beta_mean", "clean_cal")}
    tg = {k: pair(TARGETS, k, t1297) for k in ("debiased", "ridge_beta_mean", "batch_cal")}
    k200 = cert("K200 base", "exact")
    plug = cert("K200 base", "plugin_c")
    sweep = [r for r in load(SWEEP) if r["task"] == "triviaqa_text_pert" and r["label"] == "base"]
    return [
        f"The drop is {ci(task(NI220, 'base', T220)['delta_drop'])}. Ridge raises perturbed BAC "
        f"by {ci(ridge['delta_pert'])} (p_recover {n(ridge['p_recover']['value'])} % "
        f"[{n(ridge['p_recover']['low'])}, {n(ridge['p_recover']['high'])}]) and changes clean "
        f"BAC by {ci(ridge['delta_clean'])}; batch calibration raises perturbed BAC by "
        f"{ci(batch['delta_pert'])}",
        f"the drop is {ci(task(NI220_HOLD, 'base', hold)['delta_drop'])} and ridge raises "
        f"perturbed BAC by {ci(pair(NI220_HOLD, 'debiased', hold)['delta_pert'])}",
        f"clean BAC is {n(task(NI1286, 'base', 'ni1286_text_pert')['bac_clean']['value'])} and "
        f"the drop, {ci(task(NI1286, 'base', 'ni1286_text_pert')['delta_drop'])}",
        f"clean BAC {n(task(TARGETS, 'base', 'ni069_text_pert')['bac_clean']['value'])}, drop "
        f"{ci(task(TARGETS, 'base', 'ni069_text_pert')['delta_drop'], signed=True)}",
        f"(drop {ci(task(TARGETS, 'base', t1297)['delta_drop'])})",
        f"changes its perturbed BAC by {ci(tg['debiased']['delta_pert'])}, ridge with "
        f"`--beta mean` by {ci(tg['ridge_beta_mean']['delta_pert'], signed=True)}, and batch "
        f"calibration by {ci(tg['batch_cal']['delta_pert'], signed=True)}",
        f"The drop holds ({ci(task(CHAT, 'base', t1297)['delta_drop'])})",
        f"the change of perturbed BAC is {ci(chat['debiased']['delta_pert'])} with ridge at the "
        f"midpoint β, {ci(chat['ridge_beta_mean']['delta_pert'])} with the mean β, and "
        f"{ci(chat['clean_cal']['delta_pert'], signed=True)} with the clean-calibrated offset, "
        f"which moves clean BAC by {ci(chat['clean_cal']['delta_clean'], signed=True)}",
        f"the finite-sample certificate certifies {rate_ci(k200)} of the 21 examples at K = 200",
        f"the paper's plug-in {rate_ci(plug)} averaged over 50 splits (one split gave the "
        f"committed {pct(load(CERTS)['runs']['K200 base']['old_plugin_c_seed0'])} %)",
        f"the exact McNemar p is {sweep[0]['drop']['p']:.3f}",
        f"TriviaQA (a {n(-sweep[0]['drop']['value'])}-point EM drop",
        f"{n(_gsm8k()['clean']['value'])} → {n(_gsm8k()['pert']['value'])} EM, "
        f"{'not ' if _gsm8k()['drop']['p'] >= 0.05 else ''}distinguishable from zero",
        f"On ni1297 the drop is {ci(task(CHAT_T, 'base', t1297)['delta_drop'])} and ridge "
        f"changes perturbed BAC by {ci(pair(CHAT_T, 'debiased', t1297)['delta_pert'])}",
    ]


def _exact_k200(run: str) -> dict[str, float]:
    (t,) = [t for t in load(K200)["tasks"] if t["run"] == run]
    c = t["cert_splits"]["exact"]
    return {"value": c["rate"], "low": c["rate_low"], "high": c["rate_high"]}


def _gsm8k() -> dict[str, Any]:
    (row,) = [r for r in load(SWEEP) if r["task"] == "gsm8k_text_pert" and r["label"] == "base"]
    return row


def _method() -> list[str]:
    sub = load(CERTS)["subsample_k200_base"]
    c = {k: sub[k]["plugin_c"] for k in ("4", "10", "20")}
    k200, plug = cert("K200 base", "exact"), cert("K200 base", "plugin_c")
    smol = lb_row(SMOL, "format")["certificates"]["plugin_c"]
    gemma = lb_row(GEMMA, "text")["certificates"]["plugin_c"]
    return [
        f"marks {pct(c['4']['rate'])} % of the examples as certified at K = 4, "
        f"{pct(c['10']['rate'])} % at K = 10 and {pct(c['20']['rate'])} % at K = 20, and "
        f"{pct(c['4']['wrong_share'])} %, "
        f"{pct(c['10']['wrong_share'])} % and {pct(c['20']['wrong_share'])} % of those "
        "certificates are wrong",
        f"certifies {pct(sub['100']['exact']['rate'])} % at K = 100 with none wrong",
        f"over 50 splits it is {rate_ci(plug)}; the finite-sample certificate certifies "
        f"{rate_ci(k200)}, whose certified examples score {pct(k200['acc_certified'])} % on "
        f"their held-back variants and the uncertified {pct(k200['acc_uncertified'])} %",
        f"score {pct(smol['acc_certified'])} % on their held-back variants for SmolLM2",
        f"and {pct(gemma['acc_certified'])} % for Gemma (text: in doubt)",
        f"the plug-in's committed {pct(load(CERTS)['runs']['K200 base']['old_plugin_c_seed0'])} % "
        "came from one split",
    ]


def _leaderboard_doc() -> list[str]:
    rows = []
    for size in (10, 35, 100, 400):
        cells = []
        for v in (4, 8):
            mean, q = noise_spread(size, v)
            cells.append(f"{pct(mean)} / {pct(q)}")
        rows.append(f"| {size} | {cells[0]} | {cells[1]} |")
    need = {(s, v): examples_needed(s, v) for s in (0.2, 0.1, 0.05) for v in (4, 8)}

    def k(x: int) -> str:
        return f"{x:,}".replace(",", " ")

    return [
        *rows,
        f"a spread of 20 points is above noise from {need[(0.2, 4)]} examples per variant with 4 "
        f"variants ({need[(0.2, 8)]} with 8), 10 points from {need[(0.1, 4)]} ({need[(0.1, 8)]}), "
        f"5 points from {k(need[(0.05, 4)])} ({k(need[(0.05, 8)])})",
    ]


def _lb_readme() -> list[str]:
    q15 = lb_row(Q15, "format")
    sn = q15["spread_null"]
    task_rows = [r for r in load(LB)["rows"] if r["task"] != "mean"]
    above = [
        r
        for r in task_rows
        if r["spread_null"]["fmt_spread_p"] is not None and r["spread_null"]["fmt_spread_p"] < 0.05
    ]
    means = [r for r in load(LB)["rows"] if r["task"] == "mean"]
    assert all(r["spread_null"]["spread_within_noise"] for r in means)
    q069 = lb_row(Q15, "format", "ni069_format_lb")
    s1284 = lb_row(SMOL, "text", "ni1284_text_lb")
    pairs = load(LB)["comparison"]["pairs"]
    n_worst = sum(p["distinguishable"] for p in pairs if p["measure"] == "bac_worst")
    n_cons = sum(p["distinguishable"] for p in pairs if p["measure"] == "consistency")
    drops = [p for p in pairs if p["measure"] == "delta_drop" and p["distinguishable"]]
    assert len(drops) == 1
    dd = drops[0]

    def sp(r: dict[str, Any]) -> str:
        return (
            f"{pct(r['metrics']['fmt_spread']['value'])} against "
            f"{pct(r['spread_null']['fmt_spread_null_mean'])}, "
            f"p = {r['spread_null']['fmt_spread_p']:.3f}"
        )

    return [
        f"per-format spread of {pct(q15['metrics']['fmt_spread']['value'])} points",
        f"(null mean {pct(sn['fmt_spread_null_mean'])}, p = {sn['fmt_spread_p']:.2f})",
        f"ni069 format: {sp(q069)}",
        f"ni1284 text: {sp(s1284)}",
        f"{len(above)} of {len(task_rows)} task rows",
        "certified examples score "
        f"{pct(lb_row(SMOL, 'format')['certificates']['plugin_c']['acc_certified'])} %",
        f"is in doubt for Gemma under text perturbations "
        f"({pct(lb_row(GEMMA, 'text')['certificates']['plugin_c']['acc_certified'])} %)",
        f"separate the models in {n_worst} and {n_cons} of the 12 pairs",
        f"{dd['model_a']} over {dd['model_b'].split(' ')[-1]} under format changes "
        f"({ci(dd, signed=True, scale=100, bounds=True)}, Holm p = {hp(dd['p_holm'])})",
    ]


def _certs_readme() -> list[str]:
    runs = load(CERTS)["runs"]
    b200, b20 = runs["K200 base"], runs["K20 base"]
    sub = load(CERTS)["subsample_k200_base"]
    return [
        f"certifies {rate_ci(b200['rules']['exact'])} of the 21 examples; their held-back "
        f"accuracy is {pct(b200['rules']['exact']['acc_certified'])} %, the uncertified "
        f"examples' {pct(b200['rules']['exact']['acc_uncertified'])} %",
        f"p_C over 50 splits is {rate_ci(b200['rules']['plugin_c'])}; the committed "
        f"{pct(b200['old_plugin_c_seed0'])} % was one split",
        f"the plug-in p_C is {rate_ci(b20['rules']['plugin_c'])} over 50 splits (committed, one "
        f"split: {pct(b20['old_plugin_c_seed0'])} %), its certified examples scoring "
        f"{pct(b20['rules']['plugin_c']['acc_certified'])} %",
        f"it certifies {pct(sub['4']['plugin_c']['rate'])} % at K = 4, with "
        f"{pct(sub['4']['plugin_c']['wrong_share'])} % of its certificates wrong, "
        f"{pct(sub['10']['plugin_c']['rate'])} % at K = 10 "
        f"({pct(sub['10']['plugin_c']['wrong_share'])} % wrong) and "
        f"{pct(sub['20']['plugin_c']['rate'])} % at K = 20",
        f"certifies {pct(sub['57']['exact']['rate'])} % at K = 57 and "
        f"{pct(sub['100']['exact']['rate'])} % at K = 100",
        f"spread is {pct(b20['spread']['observed'])} points at K = 20 (null mean "
        f"{pct(b20['spread']['fmt_spread_null_mean'])}",
        f"{pct(b200['spread']['observed'])} at K = 200 (null mean "
        f"{pct(b200['spread']['fmt_spread_null_mean'])}",
    ]


G10 = "gemma-3-270m_all10/report/report.json"
G10_FP32 = "gemma-3-270m_all10/fp32/report/report.json"
G10_BASELINES = "gemma-3-270m_all10/report_baselines/report.json"


def across(rel: str, label: str, kind: str, metric: str) -> dict[str, float]:
    """A report's task-level mean [BCa CI over tasks] of one run (``across_runs``) or one pair
    (``across_pairs``, label ``"other vs base"``), as a :func:`ci` cell."""
    section = "across_pairs" if " vs " in label else "across_runs"
    (hit,) = [r for r in load(rel)[section] if (r["label"], r["kind"]) == (label, kind)]
    cell = hit["metrics"][metric]
    return {"value": cell["mean"], "low": cell["low"], "high": cell["high"]}


def _gemma_all10() -> list[str]:
    def a(rel: str, label: str, kind: str, metric: str, signed: bool = False) -> str:
        return ci(across(rel, label, kind, metric), signed=signed)

    def v(rel: str, label: str, kind: str, metric: str, signed: bool = False) -> str:
        return n(across(rel, label, kind, metric)["value"], signed)

    bf, fp = G10, G10_FP32
    rows = [
        f"| clean BAC | {v(bf, 'base', 'format', 'bac_clean')} | "
        f"{a(fp, 'base', 'format', 'bac_clean')} |",
        *(f"| δ_drop, {k} | {a(bf, 'base', k, 'delta_drop')} | " for k in ("format", "text")),
        *(
            f"| ridge δ_pert, {k} | {a(bf, 'debiased vs base', k, 'delta_pert', True)} | "
            for k in ("format", "text")
        ),
        *(
            f"| {name} calibration δ_pert, format / text | "
            + " / ".join(v(bf, f"{run} vs base", k, "delta_pert", True) for k in ("format", "text"))
            for name, run in (("batch", "batch_cal"), ("clean", "clean_cal"))
        ),
        f"Mean clean BAC across the 10 tasks is {v(bf, 'base', 'format', 'bac_clean')} %",
        f"The **mean drop under format perturbations**, {a(bf, 'base', 'format', 'delta_drop')} "
        f"points (task-level BCa CI over 10 tasks), is the one drop whose CI excludes 0. Text: "
        f"{a(bf, 'base', 'text', 'delta_drop')}.",
        f"Ridge: δ_pert {a(bf, 'debiased vs base', 'format', 'delta_pert', True)} (format) and "
        f"{a(bf, 'debiased vs base', 'text', 'delta_pert', True)} (text).",
    ]
    b = G10_BASELINES
    rows.append(
        f"| base | {v(b, 'base', 'format', 'bac_clean')} | {v(b, 'base', 'format', 'bac_pert')} "
        f"| {v(b, 'base', 'text', 'bac_pert')} | – |"
    )
    names = {"debias": "debias (ridge)"}
    for run in ("debias", "batch_cal", "contextual_cal", "lora", "lora_debias", "clean_cal"):
        pair_ = f"{run} vs base"
        cells = [
            f"{v(b, run, 'format', 'bac_clean')} / {v(b, run, 'text', 'bac_clean')}",
            v(b, run, "format", "bac_pert"),
            v(b, run, "text", "bac_pert"),
            *(
                a(b, pair_, k, m, True)
                for m in ("delta_pert", "delta_clean")
                for k in ("format", "text")
            ),
        ]
        rows.append(f"| {names.get(run, run)} | " + " | ".join(cells) + " |")
    return rows


def cell(c: dict[str, Any] | None, signed: bool = False) -> str:
    """``value [low, high]``, the value alone where there is no interval, – where undefined."""
    if c is None or c["value"] is None:
        return "–"
    if c["low"] is None or c["high"] is None:
        return n(c["value"], signed)
    return ci(c, signed=signed)


#: the columns of a results README's method table, read from a report's task and pair rows
COLUMNS: dict[str, Callable[[dict[str, Any], dict[str, Any] | None], str]] = {
    "bac_clean": lambda t, p: cell(t["metrics"]["bac_clean"]),
    "bac_pert": lambda t, p: cell(t["metrics"]["bac_pert"]),
    "delta_drop": lambda t, p: cell(t["metrics"]["delta_drop"], signed=True),
    "maj": lambda t, p: f"{t['maj_share_clean']:.1f}/{t['maj_share_pert']:.1f}",
    "delta_clean": lambda t, p: "–" if p is None else cell(p["metrics"]["delta_clean"], True),
    "delta_pert": lambda t, p: "–" if p is None else cell(p["metrics"]["delta_pert"], True),
    "p_recover": lambda t, p: "–" if p is None else cell(p["metrics"]["p_recover"]),
    "p_h": lambda t, p: n(t["metrics"]["p_h"]["value"]),
    "P_h": lambda t, p: n(t["metrics"]["P_h"]["value"]),
}


def method_rows(rel: str, rows: list[tuple[str, str, str]], cols: list[str]) -> list[str]:
    """Table rows ``| label | cells |`` for (task, run, label); the run named first in the
    report is the base the pairs are against (its pair cells are –)."""
    doc = load(rel)
    out = []
    for name, run, label in rows:
        (t,) = [t for t in doc["tasks"] if (t["run"], t["task"]) == (run, name)]
        ps = [p for p in doc["pairs"] if (p["other"], p["task"]) == (run, name)]
        cells = [COLUMNS[c](t, ps[0] if ps else None) for c in cols]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


FULL = ["bac_clean", "bac_pert", "delta_drop", "maj", "delta_clean", "delta_pert", "p_recover"]
BASE_RUNS = (("base", "base"), ("debiased", "ridge debias"), ("batch_cal", "batch_cal"))


def _ni1286_all() -> list[str]:
    rel, name = "qwen2.5-coder-1.5b_ni1286_all/report/report.json", "ni1286_text_pert"
    runs = [*BASE_RUNS, ("clean_cal", "clean_cal")]
    base = task(rel, "base", name)
    return [
        *method_rows(rel, [(name, r, label) for r, label in runs], FULL[:-1]),
        f"(bf16: {n(base['bac_clean']['value'])}), δ_drop",
        f"(bf16: {ci(base['delta_drop'])})",
        f"Clean BAC is {n(base['bac_clean']['value'])} (the filter asks ≥ 70)",
        f"no drop distinguishable from 0 ({ci(base['delta_drop'])})",
        f"(p_damage {n(pair(rel, 'debiased', name)['p_damage']['value'])} %)",
    ]


def _chat_all() -> list[str]:
    rel, beta = (
        "qwen2.5-coder-1.5b_chat_all/report/report.json",
        "qwen2.5-coder-1.5b_chat_all/report_beta_mean/report.json",
    )
    name = "ni1297_text_pert"
    base = task(rel, "base", name)
    mid = ("debiased", "ridge, β midpoint (λ 70)")
    return [
        *method_rows(rel, [(name, "base", "base"), (name, *mid)], FULL),
        *method_rows(beta, [(name, "ridge_mean", "ridge, β mean (λ 7 039)")], FULL),
        *method_rows(
            rel, [(name, "batch_cal", "batch_cal"), (name, "clean_cal", "clean_cal")], FULL
        ),
        f"| base | (δ_drop {ci(base['delta_drop'])}, clean {n(base['bac_clean']['value'])}) |",
        f"It is {n(base['delta_drop']['value'])}, and its whole CI lies beyond 1 point.",
        "The mean rule makes ridge neutral "
        f"({ci(pair(beta, 'ridge_mean', name)['delta_pert'], True)}).",
    ]


def _ni220_all() -> list[str]:
    rel, hold = (
        "qwen2.5-coder-1.5b_ni220_all/report/report.json",
        "qwen2.5-coder-1.5b_ni220_all/report_holdout/report.json",
    )
    name, hname = "ni220_text_pert", "ni220_text_pert_holdout"
    base, ridge = task(rel, "base", name), pair(rel, "debiased", name)
    hcols = ["bac_clean", "bac_pert", "delta_drop", "delta_pert", "p_recover", "p_h", "P_h"]
    return [
        *method_rows(
            rel, [(name, r, label) for r, label in [*BASE_RUNS, ("clean_cal", "clean_cal")]], FULL
        ),
        *method_rows(hold, [(hname, r, label) for r, label in BASE_RUNS], hcols),
        f"| base, before (bf16) | {n(base['bac_clean']['value'])} | "
        f"{n(base['bac_pert']['value'])} | {ci(base['delta_drop'])} |",
        f"| ridge, before | 100.0 | 97.6 | −2.4 | {ci(ridge['delta_pert'], True)} | "
        f"{ci(ridge['p_recover'])} |",
        f"with ties scored 1/k the bf16 drop is {n(base['delta_drop']['value'])}",
        f"recovers {ridge['p_recover']['value']:.0f} % of it (p_recover {ci(ridge['p_recover'])})",
        f"(bf16: {ci(task(hold, 'base', hname)['delta_drop'])})",
    ]


def _targets_all() -> list[str]:
    rel = "qwen2.5-coder-1.5b_targets_all/report/report.json"
    beta = "qwen2.5-coder-1.5b_targets_all/report_beta_mean/report.json"
    t69, t97 = "ni069_text_pert", "ni1297_text_pert"
    rows = [
        (t69, "base", "base"),
        (t69, "debiased", "ridge debias"),
        (t69, "batch_cal", "batch_cal"),
    ]
    rows += [(t97, r, label) for r, label in [*BASE_RUNS[1:], ("clean_cal", "clean_cal")]]
    rows.insert(3, (t97, "base", "base"))
    labelled = [(name, r, f"{name.split('_')[0]} | {label}") for name, r, label in rows]
    b97, b69 = task(rel, "base", t97), task(rel, "base", t69)
    bcols = ["bac_clean", "bac_pert", "delta_pert", "p_recover"]
    beta_rows = [
        (t97, "ridge_midpoint", "ni1297 | ridge, β midpoint (paper)"),
        (t97, "ridge_mean", "ni1297 | ridge, β mean"),
        (t97, "batch_cal", "ni1297 | batch_cal"),
        (t69, "ridge_midpoint", "ni069 | ridge, β midpoint"),
        (t69, "ridge_mean", "ni069 | ridge, β mean"),
    ]
    return [
        *method_rows(rel, labelled, FULL),
        *method_rows(beta, beta_rows, bcols),
        f"| ni069 | base | {ci(b69['delta_drop'], True)} (clean {n(b69['bac_clean']['value'])}) |",
        f"| ni1297 | base | {ci(b97['delta_drop'])} (clean {n(b97['bac_clean']['value'])}) |",
        f"Clean BAC {n(b97['bac_clean']['value'])} on an 8-way task",
        f"a drop of {n(b97['delta_drop']['value'])} whose whole CI lies beyond 1 point",
    ]


def _chat_targets() -> list[str]:
    """The result table of results/qwen2.5-coder-1.5b_chat_targets/README.md."""
    names = {"debiased": "ridge debias"}
    rows = []
    for short, runs in (
        ("ni1297", ("base", "debiased", "batch_cal", "clean_cal")),
        ("ni296", ("base", "debiased", "batch_cal")),
    ):
        name = f"{short}_text_pert"
        for run in runs:
            m = task(CHAT_T, run, name)
            cells = [ci(m["bac_clean"]), ci(m["bac_pert"]), ci(m["delta_drop"], signed=True)]
            if run == "base":
                cells += ["–", "–"]
            else:
                pm = pair(CHAT_T, run, name)
                cells += [
                    ci(pm[k], signed=True) if pm[k]["low"] != pm[k]["high"] else n(pm[k]["value"])
                    for k in ("delta_clean", "delta_pert")
                ]
            rows.append(f"| {short} | {names.get(run, run)} | " + " | ".join(cells) + " |")
    return rows


GEN = "qwen2.5-coder-1.5b_generation"
GEN_SELECT = "gemma-3-270m_gen_select/compare.md"
SELECT = "qwen2.5-coder-1.5b_select"
BENCH = "benchmarks.md"
BENCH_DOC = "results/benchmarks.md"
LB_PLAN = "leaderboard/plan_qwen2.5-coder-1.5b.md"


def table_rows(body: str) -> list[list[str]]:
    """The rows of every Markdown table in ``body``, cells stripped (no header separators)."""
    rows = []
    for line in body.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|[-:| ]+\|", line.strip()):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


@cache
def md_rows(rel: str) -> list[list[str]]:
    """The table rows of a committed results file."""
    return table_rows((R / rel).read_text(encoding="utf-8"))


def _gen_select() -> dict[str, Any]:
    """compare.md of the generation-score selection: answers moved per candidate (held-out train)
    and per test run, and whether any score or paired difference moved."""
    moved, test_moved, same, diffs = [], [], True, []
    for section in (R / GEN_SELECT).read_text(encoding="utf-8").split("\n## ")[1:]:
        rows = table_rows(section)
        cand = [r for r in rows if r[0].startswith(("**none**", "k="))]
        same &= all(r[1:3] == cand[0][1:3] for r in cand)
        moved += [r[4] for r in cand[1:]]
        test_moved += [r[3] for r in rows if r[0] == "mse"]
        diffs += [c for r in rows if " − " in r[0] for c in r[1:]]
    return {
        "moved": max(moved, key=lambda x: int(x.split("/")[0])).replace("/", " of "),
        "test": sorted(int(x.split("/")[0]) for x in test_moved),
        "test_n": {x.split("/")[1] for x in test_moved},
        "same": same,
        "diffs_zero": all(d.startswith("+0.0 ") for d in diffs) and bool(diffs),
    }


def _oracle() -> tuple[list[int], int, int]:
    """Layers where the clean state recovered nothing, then recovered / broken at the last."""
    rows = load(f"{GEN}/oracle_patch.json")["rows"]
    layers = [int(re.findall(r"L(\d+) ", r["run"])[0]) for r in rows]
    assert all(r["recovered"] == 0 for r in rows[:-1]) and layers == sorted(layers)
    return layers[:-1], rows[-1]["recovered"], rows[-1]["broken_by_perturbation"]


def _commands() -> list[str]:
    sel = _gen_select()
    assert sel["same"]  # "no candidate changed any held-out exact match"
    (test_n,) = sel["test_n"]
    low, last = _oracle()[0], _oracle()[1:]
    log = (R / GEN / "run_k.log").read_text(encoding="utf-8")
    *_, (_, total, rate) = re.findall(
        r"generation score:.*?(\d+)/(\d+) \[[^,\]]*, *([\d.]+)s/it", log
    )
    return [
        f"no candidate changed any held-out exact match (at most {sel['moved']} answers moved)",
        f"the squared error's λ changed {sel['test'][0]}–{sel['test'][-1]} of {test_n} test "
        "answers",
        f"recovered none of the {last[1]} answers the perturbations broke at layers "
        f"{', '.join(map(str, low[:-1]))} and {low[-1]} ({last[0]} of {last[1]} at the last layer)",
        f"({int(total) // 5} train prompts × 5 candidates, {rate} s per generation: "
        f"{round(int(total) * float(rate) / 60)} min for one layer) was stopped",
        f"({NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8):.2f} standard errors of the "
        "per-example differences: 80 % power at the two-sided 5 % level)",
    ]


def _guide_generation() -> list[str]:
    sel = _gen_select()
    assert sel["same"] and sel["diffs_zero"]
    rows = [r for r in load(SWEEP) if r["label"] != "base" and r["gain"] is not None]
    changed = [r["changed"][0] for r in rows]
    (n_gen,) = {r["changed"][1] for r in rows}
    assert all(r["gain"]["value"] <= 0 for r in rows)  # "recover none of the drop"
    low, rec, broken = _oracle()
    return [
        f"change {min(changed)}–{max(changed)} of {n_gen} generations and recover none of the drop",
        f"recovers none of the {broken} broken answers at layers {low[0]}–{low[-1]} ({rec} of "
        f"{broken} at the last layer)",
        f"no candidate changed any held-out exact match (at most {sel['moved']} answers moved)",
        "on the test split every paired difference is 0.0",
    ]


def _bench_envelope() -> list[str]:
    rows = {r[0].split(" (")[0]: r for r in md_rows(BENCH) if " vs " in r[0] and len(r) == 5}
    cache, own = rows["cached@16 vs plain@16"], rows["hf@16 vs hf@4"]
    assert cache[2] == "0 %"  # "no label changed"
    f32 = max((r[3] for r in rows.values()), key=float)
    return [
        f"(max log-likelihood difference {f32} on the envelope benchmark). In bf16 they differ by "
        f"rounding: {cache[1]} at most on 14 prompts of ni065_format_pert, no label changed, while "
        f"the stock `--model hf` moves its own bf16 scores by {own[1]} between batch sizes 4 and "
        "16",
    ]


def _select_style() -> list[str]:
    def table(style: str) -> dict[str, list[str]]:
        return {r[0]: r for r in md_rows(f"{SELECT}/select_{style}.md") if r[0].startswith("ni")}

    plain, chat = table("plain"), table("chat")
    both = sorted(set(plain) & set(chat))
    # columns: task, kind, style, n × K, BAC clean, δ_drop, maj. share clean, AUC clean, ...
    higher = sum(float(plain[t][4].split()[0]) > float(chat[t][4].split()[0]) for t in both)
    p220, c220 = plain["ni220"], chat["ni220"]
    return [
        f"the plain prompt had the higher clean BAC on {higher} of {len(both)} tasks",
        f"ni220 {p220[4].split()[0]} plain vs {c220[4].split()[0]} chat, where the template sent "
        f"{c220[6]} % of answers to one label while the margin AUC stayed {c220[7]})",
    ]


def _lb_cost() -> list[str]:
    z, scale = NormalDist().inv_cdf(0.975), math.sqrt(10 / 35)
    se: dict[str, list[float]] = {"format": [], "text": []}
    needed = []
    for r in md_rows(LB_PLAN):
        if r[0].startswith("ni"):
            se["format" if "_format_" in r[0] else "text"].append(float(r[5]) * scale)
            needed += [int(r[7])] if r[7] != "–" else []

    def cells(kind: str) -> tuple[str, str, str]:
        v = se[kind]
        pos = [x for x in v if x > 0]
        mean_hw = z * math.sqrt(sum(x * x for x in v)) / len(v)
        return (
            f"{n(statistics.median(v))} ({n(min(pos))}–{n(max(pos))}) points",
            f"±{n(z * statistics.median(v))} points",
            f"±{n(mean_hw)} points",
        )

    f, t = cells("format"), cells("text")
    times = dict(
        line.split(": ") for line in (R / "leaderboard/logs/times.txt").read_text().splitlines()
    )
    prompts: dict[str, int] = {}
    tasks: dict[str, int] = {}
    for r in load(LB)["rows"]:
        if r["task"] != "mean":
            prompts[r["model"]] = prompts.get(r["model"], 0) + r["n_prompts"]
            tasks[r["model"]] = tasks.get(r["model"], 0) + 1
    smol_s = int(times["smollm2-135m-instruct"].removesuffix(" s"))
    q15_s = int(times["qwen2.5-coder-1.5b-instruct"].removesuffix(" s"))
    preset = 6300
    return [
        f"| {f[0]} | {t[0]} |",
        f"| {f[1]} | {t[1]} |",
        f"| {f[2]} | {t[2]} |",
        f"(e.g. {min(needed)}–{max(needed)} examples per task for a 10-point drop at K = 8",
        f"the committed run's {min(tasks.values())}–{max(tasks.values())} tasks × 10 examples × 5 "
        f"prompts: SmolLM2 135M {smol_s} s ({prompts[SMOL]} prompts), Qwen2.5-Coder 1.5B "
        f"{round(q15_s / 60)} min ({prompts[Q15]} prompts, {prompts[Q15] / q15_s:.2f} prompts/s). "
        f"At those rates the full preset (6 300 prompts) takes about "
        f"{round(preset * smol_s / prompts[SMOL] / 60)} minutes for SmolLM2 and "
        f"{preset * q15_s / prompts[Q15] / 3600:.1f} hours for Qwen2.5-Coder 1.5B",
    ]


def seconds(cell: str) -> int:
    """``481 s (8.0 min)``, ``1 277 s``, ``2 min 3 s`` -> seconds."""
    m = re.match(r"(?:(\d+) min )?([\d ]+?) s\b", cell)
    assert m, cell
    return 60 * int(m.group(1) or 0) + int(m.group(2).replace(" ", ""))


def tqdm_seconds(rel: str, label: str) -> list[tuple[int, int]]:
    """(items, seconds) of each finished tqdm bar named ``label`` in a committed log."""
    log = (R / rel).read_text(encoding="utf-8")
    bars = re.findall(rf"{label}: 100%\|[^|]*\| *(\d+)/\d+ \[(?:(\d+):)?(\d+):(\d+)<", log)
    return [(int(k), 3600 * int(h or 0) + 60 * int(m) + int(s)) for k, h, m, s in bars]


def _fresh_venv() -> dict[str, int]:
    """The README's commands timed from a fresh venv (results/benchmarks.md), in seconds."""
    rows = {r[0]: r for r in md_rows(BENCH) if len(r) == 3}
    return {
        "install": seconds(rows["install"][2]),
        "main": seconds(rows["main command (K = 20)"][2]),
        "quick": seconds(rows["quick look"][2]),
        "report": round(float(rows["its report"][2].removesuffix(" s"))),
        "protocol": seconds(rows["paper protocol (K = 200)"][2]),
    }


def _readme_timings() -> list[str]:
    t = _fresh_venv()
    return [
        f"{round(t['main'] / 60)} minutes on a 2-core CPU from a fresh venv",
        f"(measured: {t['main']} s on an AMD EPYC without AVX512, after a "
        f"{round(t['install'] / 60)}-minute `pip install`)",
        f"(14 070 prompts): {round(t['protocol'] / 60)} minutes on the same CPU",
        f"{t['quick'] // 60} min {t['quick'] % 60} s on the same CPU, the report {t['report']} s)",
    ]


def _tasks_timings() -> list[str]:
    t = _fresh_venv()
    (run,) = (R / "gemma-3-270m_full_protocol/gemma-3-270m").glob("results_*.json")
    full = float(json.loads(run.read_text(encoding="utf-8"))["total_evaluation_time_seconds"])
    return [
        f"({round(t['main'] / 60)} minutes on a 2-core AMD EPYC without AVX512",
        f"one task is 14 070 prompts: {round(t['protocol'] / 60)} minutes on that CPU",
        f"took about {round(full / 60)} minutes on an earlier machine",
    ]


def _commands_timings() -> list[str]:
    bars = [
        b
        for log in ("run.log", "run2.log")
        for b in tqdm_seconds(f"gemma-3-270m_gen_select/{log}", "generation score")
    ]
    (total,) = {k for k, _ in bars}
    minutes = statistics.mean(s for _, s in bars) / 60
    return [f"`results/gemma-3-270m_gen_select/`: {total}, about {round(minutes)} minutes of"]


def _prefix_cache_ratio() -> str:
    for section in (R / BENCH).read_text(encoding="utf-8").split("\n## ")[1:]:
        rows = {r[0]: r for r in table_rows(section)}
        if section.startswith("ni065_format_pert") and {
            "debiased_hf",
            "debiased_hf_nocache",
        } <= set(rows):
            ratio = float(rows["debiased_hf_nocache"][1]) / float(rows["debiased_hf"][1])
            return f"the plain path ({ratio:.1f}× slower on ni065_format_pert in `{BENCH_DOC}`)"
    raise AssertionError("no prefix-cache benchmark of ni065_format_pert in results/benchmarks.md")


def _gsm8k_time() -> list[str]:
    ((k, secs),) = tqdm_seconds(f"{GEN}/run_gsm8k.log", "Running generate_until requests")
    return [f"({round(secs / 60)} min for {k} chain-of-thought generations)"]


A15 = "wrap_bigbench_all15/leaderboard/leaderboard.json"


def _a15() -> list[str]:
    """results/wrap_bigbench_all15/README.md: its mean-row table and the prose on it."""
    board = load(A15)
    mean = {(r["model"], r["kind"]): r for r in board["rows"] if r["task"] == "mean"}

    def cell(c: dict[str, Any], signed: bool = False) -> str:
        f = "{:+.1f}" if signed else "{:.1f}"
        text = f.format(100 * c["value"])
        if c.get("low") is not None and c["high"] > c["low"]:
            text += f" [{f.format(100 * c['low'])}, {f.format(100 * c['high'])}]"
        return text.replace("-", "−")

    def neg(c: dict[str, Any]) -> str:  # a drop quoted as a positive size with its interval
        return f"{-100 * c['value']:.1f} [{-100 * c['high']:.1f}, {-100 * c['low']:.1f}]"

    rows = []
    for (model, _kind), r in mean.items():
        st, m = r["stock"]["acc"]["metrics"], r["metrics"]
        rows.append(
            f"| {model} | {r['n_examples']} | {cell(st['clean'])} | {cell(st['pert'])} | "
            f"{cell(st['drop'], True)} | {cell(m['bac_clean'])} | {cell(m['delta_drop'], True)} |"
        )
    smol = mean[("smollm2-135m-instruct", "text")]
    (pair,) = [
        p
        for p in board["comparison"]["pairs"]
        if (p["kind"], p["measure"], p["model_a"], p["model_b"])
        == ("text", "delta_drop", "smollm2-135m-instruct", "gemma-3-270m")
    ]
    gemma = {
        k: mean[("gemma-3-270m", k)]["metrics"]["consistency"]["value"] for k in ("format", "text")
    }
    chance = [
        float(line.split("|")[3])
        for line in (R / "wrap_bigbench_all15/chance.md").read_text().splitlines()
        if line.startswith("| ") and not line.startswith("| task")
    ]
    return [
        *rows,
        f"its `acc` drops {neg(smol['stock']['acc']['metrics']['drop']).replace(' [', ' points [')}"
        " and its BAC "
        f"{neg(smol['metrics']['delta_drop'])}",
        f"the BAC drop differs by {-100 * pair['diff']:.1f} points [{-100 * pair['high']:.1f}, "
        f"{-100 * pair['low']:.1f}] (Holm p = {pair['p_holm']:.3f})",
        f"{100 * gemma['format']:.1f} % under format and {100 * gemma['text']:.1f} % under text",
        f"is {sum(chance) / len(chance):.1f} %",
    ]


N40 = "wrap_bigbench_n40"


def _n40() -> list[str]:
    """results/wrap_bigbench_n40/README.md: the mean-row tables (as scripts/wrap_mean_rows.py
    renders leaderboard.json), the chance count, the paired comparisons and the plans' ranges."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "wrap_mean_rows", ROOT / "scripts" / "wrap_mean_rows.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    board = load(f"{N40}/leaderboard/leaderboard.json")
    tables = [x for x in mod.mean_tables(board).splitlines() if x.startswith("| ")]
    pairs = {
        (p["kind"], p["measure"], p["model_a"], p["model_b"]): p
        for p in board["comparison"]["pairs"]
    }
    stock = {
        (p["kind"], p["measure"], p["model_a"], p["model_b"]): p
        for p in board["stock_comparison"]["acc"]["pairs"]
    }
    g, q = "gemma-3-270m", "qwen2.5-coder-1.5b-instruct"
    dd, sd = pairs[("format", "delta_drop", g, q)], stock[("format", "drop", g, q)]
    chance = (R / N40 / "chance.md").read_text(encoding="utf-8").splitlines()[-1]
    n_at = re.search(r"on (\d+) of (\d+) task rows", chance)
    assert n_at is not None
    mean_det, ten = [], []
    for f in sorted((R / N40).glob("plan_*.md")):
        rows = md_rows(f"{N40}/{f.name}")
        if f.name.startswith("plan_pilot_"):
            continue
        means = [r for r in rows if r[0].startswith("mean over")]
        ten += [int(r[5]) for r in means if len(r) == 6]  # first table: examples needed, K = 1
        mean_det += [float(r[4]) for r in means if len(r) == 5]  # budget table: detects
    return [
        *tables,
        f"**Qwen 1.5B is at or below chance on {n_at.group(1)} of {n_at.group(2)} task rows**",
        f"The difference, Gemma minus Qwen 1.5B, is {100 * dd['diff']:.1f} points of δ_drop\n"
        f"  [{100 * dd['low']:.1f}, {100 * dd['high']:.1f}] (Holm p = {dd['p_holm']:.3f}) and "
        f"{100 * sd['diff']:.1f} points of `acc` drop [{100 * sd['low']:.1f}, "
        f"{100 * sd['high']:.1f}] (Holm p = {sd['p_holm']:.3f})",
        f"rows detect {min(mean_det):.1f} to {max(mean_det):.1f} points, and a 10-point drop of "
        f"the mean needs {min(ten)} to {max(ten)} examples per task",
    ]


CLAIMS: dict[str, tuple[str, Callable[[], list[str]]]] = {
    "readme": ("README.md", _readme),
    "wrap-bigbench-all15-readme": ("results/wrap_bigbench_all15/README.md", _a15),
    "wrap-bigbench-n40-readme": ("results/wrap_bigbench_n40/README.md", _n40),
    "results-guide": ("docs/results-guide.md", _guide),
    "method-and-metrics": ("docs/method-and-metrics.md", _method),
    "leaderboard-doc": ("docs/leaderboard.md", _leaderboard_doc),
    "leaderboard-doc-cost": ("docs/leaderboard.md", _lb_cost),
    "commands": ("docs/commands.md", _commands),
    "commands-timings": ("docs/commands.md", _commands_timings),
    "readme-timings": ("README.md", _readme_timings),
    "tasks-and-settings-timings": ("docs/tasks-and-settings.md", _tasks_timings),
    "results-guide-gsm8k-time": ("docs/results-guide.md", _gsm8k_time),
    "results-guide-generation": ("docs/results-guide.md", _guide_generation),
    "engines": ("docs/engines.md", lambda: [*_bench_envelope(), _prefix_cache_ratio()]),
    "tasks-and-settings": ("docs/tasks-and-settings.md", _select_style),
    "leaderboard-readme": ("results/leaderboard/README.md", _lb_readme),
    "certificates-readme": (
        "results/qwen2.5-coder-1.5b_ni220_certificates/README.md",
        _certs_readme,
    ),
    "gemma-all10-readme": ("results/gemma-3-270m_all10/README.md", _gemma_all10),
    "chat-targets-readme": ("results/qwen2.5-coder-1.5b_chat_targets/README.md", _chat_targets),
    "ni1286-all-readme": ("results/qwen2.5-coder-1.5b_ni1286_all/README.md", _ni1286_all),
    "chat-all-readme": ("results/qwen2.5-coder-1.5b_chat_all/README.md", _chat_all),
    "ni220-all-readme": ("results/qwen2.5-coder-1.5b_ni220_all/README.md", _ni220_all),
    "targets-all-readme": ("results/qwen2.5-coder-1.5b_targets_all/README.md", _targets_all),
    "k200-readme": (
        "results/qwen2.5-coder-1.5b_ni220_k200/README.md",
        lambda: [
            f"K = 200 plug-in p_C is {rate_ci(cert('K200 base', 'plugin_c'))}",
            f"at K = 200 it certifies {rate_ci(cert('K200 base', 'exact'))} of the 21 examples",
            *(
                f"| {ci(_exact_k200(run), scale=100)} | "
                for run in ("base", "debiased", "batch_cal", "clean_cal")
            ),
        ],
    ),
}


@cache
def rendered(name: str) -> tuple[str, ...]:
    """A claim's fragments, rendered once per session (the audit reads them again)."""
    return tuple(CLAIMS[name][1]())


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_quoted_numbers_match_their_files(name: str) -> None:
    doc = CLAIMS[name][0]
    body = text(doc)
    missing = [c for c in rendered(name) if " ".join(c.split()) not in body]
    assert not missing, f"{doc}: stale or missing: {missing}"


def test_formatting_helpers() -> None:
    assert n(-6.045) == "−6.0" and n(0.04, signed=True) == "+0.0" and n(-0.04) == "0.0"
    cell = {"value": -0.1, "low": -0.2, "high": 0.05}
    assert ci(cell, signed=True, scale=100) == "−10.0 [−20.0, 5.0]"
    assert ci(cell, signed=True, scale=100, bounds=True) == "−10.0 [−20.0, +5.0]"
    assert not math.isnan(float(pct(0.5)))


# ---------------------------------------------------------------------------------------------
# The audit: every number in README.md and docs/ that looks like a result is produced by a claim
# above, or is listed below with its kind. A number "looks like a result" when it is a decimal
# (2.84, 1.5e-02), a percentage (84 %, 9.5 %), a count "N of M", a duration (481 s, 37 min) or a
# speed ratio (2.5×); plain integers (sizes, K, seeds) and arithmetic (70 × 21) are not read.
# Recognised without a list:
# versions (two dots, or a pip specifier such as `<0.5`), model names (a number glued to letters:
# qwen2.5, 1.5B), settings written as flags or arguments (`--phi 0.05`, `dtype=0.3`,
# `"text_rate": 0.05`) or as the certificate's and tests' levels (`φ = 0.1`, `α = 0.05`), the
# confidence level of an interval ("95 % BCa"), HTML comments (not shown to a reader) and fenced
# blocks that hold only commands or code (a table of results in a fence is still read).

NUMBER = re.compile(
    r"\d+(?:\.\d+)?e[-+]?\d+"  # 1.5e-02, 1e-3
    r"|\d+ of (?:the )?\d+"  # 4 of 16
    r"|\d+(?:\.\d+|(?: \d{3})+)?(?:–\d+)?[- ]?(?:s|min|minutes?|hours?)(?!\w)"  # 1 277 s
    r"|\d+(?:\.\d+)?(?:–\d+(?:\.\d+)?)?×"  # 2–3×, 7.2×
    r"|\d+(?:\.\d+)+(?:\s?%)?"  # 2.84, 9.5 %, 0.4.13
    r"|\d+\s?%"  # 84 %
)
SETTING = re.compile(r"(?:--[\w-]+[ =]|\w=|\"\w+\": ?)$")
PROGRAMS = {"lm_eval", "lm-eval-robust", "pip", "python", "bash", "pytest", "export", "cd", "git"}
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)
KINDS = ("version", "model name", "setting", "formula constant", "command example")


def _commands_only(lang: str, body: str) -> bool:
    """A fenced block that holds only commands (bash) or code (python), no output."""
    if lang == "python":
        return True
    if lang not in ("bash", "sh"):
        return False
    logical = re.sub(r"\\\n", " ", body).splitlines()
    for line in (x.strip() for x in logical):
        if not line or line.startswith("#"):
            continue
        words = [w for w in line.split() if not re.fullmatch(r"[A-Z_]+=\S*", w)]
        if not words or words[0] not in PROGRAMS:
            return False
    return True


def _hidden(raw: str) -> list[tuple[int, int]]:
    """Raw spans a reader does not see as prose: HTML comments and command-only fences."""
    spans = [m.span() for m in re.finditer(r"<!--.*?-->", raw, re.S)]
    spans += [m.span() for m in FENCE.finditer(raw) if _commands_only(m.group(2), m.group(3))]
    return spans


def _normalise(raw: str) -> tuple[str, list[int]]:
    """Whitespace collapsed as `text` does it, with each character's offset in ``raw``."""
    chars: list[str] = []
    where: list[int] = []
    for m in re.finditer(r"\S+", raw):
        if chars:
            chars.append(" ")
            where.append(m.start() - 1)
        chars.extend(m.group())
        where.extend(range(m.start(), m.end()))
    return "".join(chars), where


def _spans(body: str, fragments: list[str]) -> list[tuple[int, int]]:
    out = []
    for frag in fragments:
        frag = " ".join(frag.split())
        start = body.find(frag)
        while frag and start >= 0:
            out.append((start, start + len(frag)))
            start = body.find(frag, start + 1)
    return out


def _recognised(body: str, a: int, b: int) -> bool:
    """A version, a model name or a setting written as a flag or argument."""
    token = body[a:b]
    before, after = body[max(0, a - 24) : a], body[b : b + 2]
    if re.fullmatch(r"\d+(?:\.\d+){2,}", token):  # 0.4.13, 2.13.0
        return True
    if re.search(r"(?:[<>=]=?|~=)$", before):  # lm-eval>=0.4.11,<0.5
        return True
    if before[-1:].isalpha() or re.match(r"[BbMm](?![a-z])", after):  # qwen2.5, 1.5B
        return True
    if token == "95 %" and re.match(r" (?:BCa|CI|confidence|interval)", body[b : b + 12]):
        return True  # the confidence level of an interval
    return bool(SETTING.search(before) or re.search(r"(?:^|[\s(])[αφψ] = $", before))


def audit(raw: str, claims: list[str], allowed: list[tuple[str, str]]) -> list[str]:
    """The numbers of ``raw`` that look like results and no claim or allowed fragment covers,
    each as ``line N: 'number' in …context…``."""
    body, where = _normalise(raw)
    hidden = _hidden(raw)
    covered = _spans(body, claims) + _spans(body, [frag for frag, _ in allowed])
    out = []
    for m in NUMBER.finditer(body):
        a, b = m.span()
        if (b < len(body) and body[b].isdigit()) or (a and body[a - 1].isdigit()):
            continue  # part of a longer token the pattern split
        if any(x <= where[a] < y for x, y in hidden) or _recognised(body, a, b):
            continue
        if any(x <= a and b <= y for x, y in covered):
            continue
        line = raw.count("\n", 0, where[a]) + 1
        out.append(f"line {line}: {m.group()!r} in …{body[max(0, a - 40) : b + 25]}…")
    return out


AUDITED = ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))]

# Numbers that are not results, per document: a fragment that holds them (so the entry names
# the place, not the number) and its kind.
ALLOWED: dict[str, list[tuple[str, str]]] = {
    "docs/commands.md": [
        ("clean BAC ≥ 70 % (`--min_clean_bac`)", "setting"),
        ("(AUC > 0.5)", "formula constant"),
        ("α = 0.05 with power 0.8 (`--alpha`, `--power`)", "setting"),
        ("`--clean_margin` (default 0.01, one BAC point)", "setting"),
        ("`--clean_margin` (default 0.01, one point)", "setting"),
        ("`--confidence` 0.5–0.999", "setting"),
        ("AdamW lr 1e-3", "setting"),
        ("not against 50 %", "formula constant"),
        ("log-likelihoods within 2e-4", "setting"),
        ("(default `1e-4,1e-2,1`;", "setting"),
        ("grid `1e-4 … 1`", "setting"),
    ],
    "docs/engines-and-install.md": [("Python 3.11", "version")],
    "docs/engines.md": [
        ("(default 0.92,", "setting"),
        ("`debiased_vllm` sets 0.3 on a CPU", "setting"),
        ("vLLM ≥ 0.32", "version"),
        ("below 2e-3 (bare, constant) and 5e-3 (merged ridge)", "setting"),
        ("labels below 2e-3", "setting"),
        ("log-likelihoods within 2e-4", "setting"),
    ],
    "docs/leaderboard.md": [
        ("A spread with p ≥ 0.05", "setting"),
        ("failure ratio and level, 0.1 and 0.05", "setting"),
        ("adjusted p is below 0.05", "setting"),
        ("at 70 % accuracy (`spread_null.", "setting"),
        ("half-widths are 1.96 SE", "formula constant"),
        ("| 95 % CI half-width", "setting"),
    ],
    "docs/method-and-metrics.md": [
        ("`--clean_margin` (default 0.01, one BAC point)", "setting"),
    ],
    "docs/tasks-and-settings.md": [
        ("`text_rate` (0.05)", "setting"),
        (
            "70 × 71 = 4 970 distinct prompts (identical prompts are computed once): 3.4 times",
            "formula constant",
        ),
    ],
}


def _claims_of(doc: str) -> list[str]:
    return [c for name, (d, _) in CLAIMS.items() if d == doc for c in rendered(name)]


@pytest.mark.parametrize("doc", AUDITED)
def test_every_number_is_read_from_its_file(doc: str) -> None:
    unexplained = audit(
        (ROOT / doc).read_text(encoding="utf-8"), _claims_of(doc), ALLOWED.get(doc, [])
    )
    assert not unexplained, (
        f"{doc}: numbers that no claim reads from a committed file (add a claim in "
        f"tests/test_docs_numbers.py, or list a number that is not a result in ALLOWED with its "
        f"kind): {unexplained}"
    )


def test_allowed_entries_are_live() -> None:
    for doc, entries in ALLOWED.items():
        body = text(doc)
        for frag, kind in entries:
            assert kind in KINDS, (doc, frag, kind)
            assert " ".join(frag.split()) in body, f"{doc}: allowed fragment gone: {frag!r}"
            assert NUMBER.search(frag), f"{doc}: allowed fragment holds no number: {frag!r}"


def test_audit_finds_a_new_result_without_a_claim() -> None:
    doc = (
        "Qwen2.5-Coder 1.5B on lm-eval 0.4.13 (`lm-eval>=0.4.11,<0.5`), `--phi 0.05`.\n"
        "The drop is 6.0 points [−9.2, −4.0].\n"
        "<!-- docs-run\nargs 1: --lam 0.5\n-->\n"
        "```bash\nlm_eval --tasks x \\\n    --metadata '{\"n\": 2}'  # 0.25 here\n```\n"
        "```\n| task | BAC |\n| ni065 | 71.4 |\n```\n"
        "It certifies 9.5 % of the examples, 4 of 16 below 90 %.\n"
    )
    claims = ["The drop is 6.0 points [−9.2, −4.0]"]
    found = audit(doc, claims, [("below 90 %", "setting")])
    assert [f.split(":")[0] for f in found] == ["line 12", "line 14", "line 14"]
    assert "'71.4'" in found[0] and "'9.5 %'" in found[1] and "'4 of 16'" in found[2]
    # a number added later beside a claimed one is found too
    found = audit(doc.replace("−4.0].", "−4.0], 3.7 after ridge."), claims, [])
    assert any("'3.7'" in f for f in found) and any("'90 %'" in f for f in found)
    # timings and speed ratios are results too; plain integers, sizes and arithmetic are not
    found = audit("It took 481 s (2 min 21 s on the quick look), 2–3× faster.", [], [])
    assert [f.split("'")[1] for f in found] == ["481 s", "2 min", "21 s", "2–3×"]
    assert audit("All 100 examples, 70 × 21 = 1 470 prompts, K = 200, 3 folds.", [], []) == []
