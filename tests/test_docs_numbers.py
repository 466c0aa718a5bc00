"""Numbers quoted in README.md, docs/ and the results READMEs, read from the committed files they
come from: a redone run cannot leave a stale number behind.

Each claim renders the sentence fragment a document quotes from the committed JSON (report,
leaderboard, sweep, certificate summary) and checks it is in the document (whitespace
normalised, so line breaks do not matter).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path
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


CLAIMS: dict[str, tuple[str, Callable[[], list[str]]]] = {
    "readme": ("README.md", _readme),
    "results-guide": ("docs/results-guide.md", _guide),
    "method-and-metrics": ("docs/method-and-metrics.md", _method),
    "leaderboard-doc": ("docs/leaderboard.md", _leaderboard_doc),
    "leaderboard-readme": ("results/leaderboard/README.md", _lb_readme),
    "certificates-readme": (
        "results/qwen2.5-coder-1.5b_ni220_certificates/README.md",
        _certs_readme,
    ),
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


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_quoted_numbers_match_their_files(name: str) -> None:
    doc, claims = CLAIMS[name]
    body = text(doc)
    missing = [c for c in claims() if " ".join(c.split()) not in body]
    assert not missing, f"{doc}: stale or missing: {missing}"


def test_formatting_helpers() -> None:
    assert n(-6.045) == "−6.0" and n(0.04, signed=True) == "+0.0" and n(-0.04) == "0.0"
    cell = {"value": -0.1, "low": -0.2, "high": 0.05}
    assert ci(cell, signed=True, scale=100) == "−10.0 [−20.0, 5.0]"
    assert ci(cell, signed=True, scale=100, bounds=True) == "−10.0 [−20.0, +5.0]"
    assert not math.isnan(float(pct(0.5)))
