"""The report as tables: Markdown (the sections a reader scans), CSV (one row per run × task) and
JSON (everything, NaN as null). The numbers are :mod:`lm_eval_robust.report.estimates`'; nothing
here computes a statistic, it only formats one (one decimal; "n/a" where a value is undefined).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from lm_eval_robust.report.cert_report import render as render_cert_rows
from lm_eval_robust.report.estimates import (
    LABELS,
    PAIR_METRICS,
    Estimate,
    GroupSummary,
    Report,
    TaskSummary,
)
from lm_eval_robust.report.markdown import FIT_LABELS, FIT_STATS, markdown_table
from lm_eval_robust.report.summary import summary_markdown
from lm_eval_robust.stats.certificate_checks import Verification

__all__ = ["to_csv", "to_json", "to_markdown"]


def _one_decimal(v: float) -> str:
    """A percentage with one decimal ("-0.0" shown as "0.0"); "n/a" when not finite."""
    if not math.isfinite(v):
        return "n/a"
    text = f"{v:.1f}"
    return "0.0" if text == "-0.0" else text


def _estimate_cell(e: Estimate) -> str:
    """ "value [low, high]", or the value alone where there is no interval."""
    if not math.isfinite(e.value):
        return "n/a"
    if not (math.isfinite(e.low) and math.isfinite(e.high)):
        return _one_decimal(e.value)
    return f"{_one_decimal(e.value)} [{_one_decimal(e.low)}, {_one_decimal(e.high)}]"


def _fit_cell(v: Any) -> str:
    return _one_decimal(float(v)) if isinstance(v, int | float) else "–"


def _verification_cells(v: Verification | None) -> list[str]:
    """ "BAC certified / uncertified" and the number certified, for one rule's verification."""
    if v is None:
        return ["n/a", "n/a"]
    return [
        f"{_one_decimal(100 * v.bac_certified)} / {_one_decimal(100 * v.bac_uncertified)}",
        str(v.n_certified),
    ]


def _across_table(groups: Sequence[GroupSummary]) -> str:
    """Rows: metrics; columns: one per (model, kind) group, "mean [low, high] (tasks)"."""
    header = ["metric"] + [f"{g.label} ({g.kind})" for g in groups]
    names = list(groups[0].metrics)
    rows = []
    for name in names:
        row = [LABELS[name]]
        for g in groups:
            v = g.metrics[name]
            row.append(f"{_estimate_cell(Estimate(v.mean, v.low, v.high))} ({v.n_tasks})")
        rows.append(row)
    return markdown_table(header, rows)


def to_markdown(report: Report) -> str:
    s = report.settings
    pct = round(100 * s.confidence)
    out = [
        "# Robustness report",
        "",
        "Runs: "
        + "; ".join(
            f"**{r['label']}** ({r['model']}, {r.get('prompt_style', 'plain')} prompts"
            f"{', replayed from a logged run' if r.get('replay') else ''}, `{r['results']}`)"
            for r in report.runs
        ),
        "",
        f"All values in percent. [{pct}% CI]: BCa, {s.n_resamples} resamples of source examples "
        f"(an example's variants move together; paired runs share resamples), seed {s.seed}. "
        f"Certificates: estimator `{s.cert.estimator}`, φ = {s.cert.phi}, ψ = {s.cert.psi}, "
        f"ε_B rule `{s.cert.eps_rule}`, "
        f"density rule `{s.cert.density_rule}`, Chebyshev `{s.cert.chebyshev}`.",
        "",
    ]
    out += summary_markdown(report)
    out += ["## Robustness per model × task", ""]
    header = ["model", "task", "n", "K", "BAC clean", "BAC pert", "δ_drop", "maj. clean/pert"]
    header += ["tied", "certified (exact)", "plug-in p_C", "plug-in p_H", "P_C", "P_H"]
    rows = []
    for t in report.tasks:
        k = t.n_variants / max(t.n_examples, 1)
        m = t.metrics
        rows.append(
            [t.run, t.task, str(t.n_examples), f"{k:.0f}"]
            + [_estimate_cell(m[x]) for x in ("bac_clean", "bac_pert", "delta_drop")]
            + [
                f"{_one_decimal(t.maj_share_clean)}/{_one_decimal(t.maj_share_pert)}",
                _one_decimal(t.tie_share),
                _exact_cell(t),
            ]
            + [_estimate_cell(m[x]) for x in ("p_c", "p_h", "P_c", "P_h")]
        )
    out += [markdown_table(header, rows), ""]
    out += [
        "certified (exact): the finite-sample certificate, mean over random estimation/held-back "
        "splits [interval over examples and splits], n/a below the K it needs; plug-in p_C, p_H "
        "(and P_C, P_H from them): the certificate estimator named above on one split, at this "
        "run's K, an estimate without a finite-sample guarantee (see Certificates over splits).",
        "",
    ]
    if len({p.other for p in report.pairs}) > 1:
        out += _side_by_side(report)
    if report.pairs:
        by_key = {(t.run, t.task): t for t in report.tasks}
        out += ["## Debiasing: each run vs the first (paired by example)", ""]
        header = ["model vs base", "task", "δ_drop (base)", "BAC clean (base)", "maj. pert"]
        header += ["δ_clean", "δ_pert", "p_damage", "p_recover", "p_clean", "p_combined"]
        fit_cols = [c for c in FIT_STATS if any(c in t.fit for t in report.tasks)]
        header += [FIT_LABELS[c] for c in fit_cols]
        rows = []
        for p in report.pairs:
            tb, to = by_key[(p.base, p.task)], by_key[(p.other, p.task)]
            rows.append(
                [f"{p.other} vs {p.base}", p.task, _estimate_cell(tb.metrics["delta_drop"])]
                + [_one_decimal(tb.metrics["bac_clean"].value)]
                + [f"{_one_decimal(tb.maj_share_pert)} → {_one_decimal(to.maj_share_pert)}"]
                + [_estimate_cell(p.metrics[x]) for x in PAIR_METRICS[:6]]
                + [_fit_cell(to.fit.get(c)) for c in fit_cols]
            )
        out += [markdown_table(header, rows), ""]
        if fit_cols:
            out += [
                "p_εV / p_εL: mean percentage decrease of the robustness radii over the label "
                "logits (paper, Section 4), measured by `fit` on the train features it was fitted "
                "on and by `replay` on this run's own (test) features; ε_L with the corrected "
                "head rows' norms; – where the run applied no correction or was not replayed.",
                "",
            ]
        out += ["## Certification before → after", ""]
        header = ["model vs base", "task"]
        for x in ("p_c", "p_h", "P_c", "P_h"):
            header += [LABELS[x], LABELS[x] + "'", "Δ" + LABELS[x]]
        rows = []
        for p in report.pairs:
            tb, to = by_key[(p.base, p.task)], by_key[(p.other, p.task)]
            row = [f"{p.other} vs {p.base}", p.task]
            for x in ("p_c", "p_h", "P_c", "P_h"):
                row += [_one_decimal(tb.metrics[x].value), _one_decimal(to.metrics[x].value)]
                row += [_estimate_cell(p.metrics["d_" + x])]
            rows.append(row)
        out += [markdown_table(header, rows), ""]
    out += [
        "## Verification of per-example certificates",
        "",
        "BAC of the held-back verification variants of certified / uncertified examples "
        "(Table 12); n = certified examples.",
        "",
    ]
    rows = []
    for t in report.tasks:
        rows.append(
            [
                t.run,
                t.task,
                *_verification_cells(t.verification.get("c")),
                *_verification_cells(t.verification.get("h")),
            ]
        )
    out += [markdown_table(["model", "task", "BAC_C", "n_C", "BAC_H", "n_H"], rows), ""]
    out += _check_section(report)
    out += _splits_section(report)
    out += [
        "## Across tasks",
        "",
        f"Task-level mean [{pct}% BCa CI, bootstrap over tasks] (number of tasks); no CI: fewer "
        "than 3 tasks or all equal.",
        "",
    ]
    for groups in (report.across_runs, report.across_pairs):
        if groups:
            out += [_across_table(groups), ""]
    notes = list(dict.fromkeys(report.notes))
    notes += _grouped_notes(
        [(f"{t.run} / {t.task}", n) for t in report.tasks for n in t.notes], len(report.tasks)
    )
    notes += _grouped_notes(
        [(f"{p.other} vs {p.base} / {p.task}", n) for p in report.pairs for n in p.notes],
        len(report.pairs),
    )
    if notes:
        out += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    return "\n".join(out)


def _exact_cell(t: TaskSummary) -> str:
    c = t.cert_splits.get("exact")
    if c is None:
        return "–"
    if not c.available:
        need = c.reason.split("K >= ")[1].split(" ")[0] if "K >= " in c.reason else "?"
        return f"n/a (K ≥ {need})"
    cell = _one_decimal(100 * c.rate)
    if math.isfinite(c.rate_low) and math.isfinite(c.rate_high) and c.rate_high > c.rate_low:
        cell += f" [{_one_decimal(100 * c.rate_low)}, {_one_decimal(100 * c.rate_high)}]"
    return cell


def _splits_section(report: Report) -> list[str]:
    rows = [(t.run, t.task, c) for t in report.tasks for c in t.cert_splits.values()]
    if not rows:
        return []
    s = report.settings
    return [
        "## Certificates over splits, checked on held-back variants",
        "",
        *render_cert_rows(rows, s.cert.phi, s.n_splits),
        "",
    ]


def _check_section(report: Report) -> list[str]:
    """Both certificate estimators per task with their check on the held-back variants."""
    rows = []
    flagged = []
    phi = report.settings.cert.phi
    for t in report.tasks:
        for c in t.checks:
            rule = {"c": "Chebyshev (p_C)", "h": "Hoeffding (p_H)"}[c.rule]
            mark = " **FLAG**" if c.flagged else ""
            if c.flagged:
                flagged.append(f"{t.run} / {t.task} / {c.estimator} {rule}")
            worst = f"{_one_decimal(100 * c.worst_certified)} ({c.worst_example})"
            rows.append(
                [
                    t.run,
                    t.task,
                    c.estimator,
                    rule,
                    _one_decimal(100 * c.rate),
                    _one_decimal(100 * c.population),
                    f"{c.n_certified}/{c.n_eligible}",
                    _one_decimal(100 * c.acc_certified) + mark,
                    _one_decimal(100 * c.acc_uncertified),
                    worst if c.worst_example else "–",
                    str(c.n_below),
                ]
            )
    if not rows:
        return []
    header = ["model", "task", "estimator", "rule", "rate", "population", "certified"]
    header += ["acc. held-back, certified", "uncertified", "worst certified (example)"]
    header += [f"certified < {_one_decimal(100 * (1 - phi))}"]
    lines = [
        "## Certificate check: both estimators against held-back variants",
        "",
        "Each estimator certifies from one half of an example's variants; the other half checks "
        f"it. A certified example promises at least {_one_decimal(100 * (1 - phi))} % accuracy "
        "on its perturbations; a rule whose certified examples fall below that on their held-back "
        "variants (pooled) is flagged. `paper`: ε_B = 0 and C·V_B = 1 (the box of the "
        "estimation shifts, uniform reference; Remark E.3 as the paper uses it); "
        "`distribution_free`: ε_B = 1/(n+1), C·V_B from a histogram.",
        "",
        markdown_table(header, rows),
        "",
    ]
    if flagged:
        lines += ["Flagged: " + "; ".join(flagged) + ".", ""]
    return lines


def _side_by_side(report: Report) -> list[str]:
    """Every run of each task in consecutive rows, in the order the runs were given: its own
    BAC (clean, perturbed, drop, majority shares) and its paired deltas against the first run."""
    order = {r["label"]: i for i, r in enumerate(report.runs)}
    pairs = {(p.other, p.task): p for p in report.pairs}
    base = report.runs[0]["label"]
    header = ["task", "method", "BAC clean", "BAC pert", "δ_drop", "maj. clean/pert"]
    header += [f"δ_clean vs {base}", f"δ_pert vs {base}", "p_recover"]
    rows = []
    for t in sorted(report.tasks, key=lambda t: (t.task, order.get(t.run, len(order)))):
        p = pairs.get((t.run, t.task))
        rows.append(
            [t.task, t.run]
            + [_estimate_cell(t.metrics[x]) for x in ("bac_clean", "bac_pert", "delta_drop")]
            + [f"{_one_decimal(t.maj_share_clean)}/{_one_decimal(t.maj_share_pert)}"]
            + (
                [_estimate_cell(p.metrics[x]) for x in ("delta_clean", "delta_pert", "p_recover")]
                if p
                else ["–", "–", "–"]
            )
        )
    return [
        "## Methods side by side (each paired with the first run by example)",
        "",
        markdown_table(header, rows),
        "",
    ]


def _grouped_notes(pairs: Sequence[tuple[str, str]], rows: int) -> list[str]:
    """One line per distinct note, naming the rows (of ``rows``) it applies to."""
    by_note: dict[str, list[str]] = {}
    for row, note in pairs:
        by_note.setdefault(note, []).append(row)
    out = []
    for note, names in by_note.items():
        if len(names) == 1:
            out.append(f"{names[0]}: {note}")
        elif len(names) == rows and rows > 2:
            out.append(f"all rows: {note}")
        else:
            out.append(f"{note} ({', '.join(names)})")
    return out


def _prefixed_estimates(prefix: str, metrics: dict[str, Estimate]) -> dict[str, float]:
    """CSV columns ``<prefix><name>``, ``…_low``, ``…_high`` for each estimate."""
    row: dict[str, float] = {}
    for name, e in metrics.items():
        row[f"{prefix}{name}"] = e.value
        row[f"{prefix}{name}_low"] = e.low
        row[f"{prefix}{name}_high"] = e.high
    return row


def to_csv(report: Report) -> str:
    """One row per run × task; runs after the first carry the paired metrics vs the first."""
    pairs = {(p.other, p.task): p for p in report.pairs}
    rows: list[dict[str, Any]] = []
    for t in report.tasks:
        row: dict[str, Any] = {
            "run": t.run,
            "model": t.model,
            "task": t.task,
            "kind": t.kind,
            "split": t.split,
            "n_examples": t.n_examples,
            "n_variants": t.n_variants,
            "maj_share_clean": t.maj_share_clean,
            "maj_share_pert": t.maj_share_pert,
            "tie_share": t.tie_share,
        }
        row.update(_prefixed_estimates("", t.metrics))
        for rule, rs in t.cert_splits.items():
            row[f"cert_{rule}"] = 100 * rs.rate if rs.available else math.nan
            row[f"cert_{rule}_low"] = 100 * rs.rate_low if rs.available else math.nan
            row[f"cert_{rule}_high"] = 100 * rs.rate_high if rs.available else math.nan
            row[f"cert_{rule}_k"] = rs.k
        for c in t.checks:
            pre = f"check_{c.estimator}_{c.rule}_"
            row[pre + "rate"] = 100 * c.rate
            row[pre + "acc_certified"] = 100 * c.acc_certified
            row[pre + "acc_uncertified"] = 100 * c.acc_uncertified
            row[pre + "worst_certified"] = 100 * c.worst_certified
            row[pre + "flagged"] = int(c.flagged)
        row.update({f"fit_{k}": v for k, v in t.fit.items()})
        for rule, v in t.verification.items():
            row[f"ver_bac_certified_{rule}"] = 100 * v.bac_certified
            row[f"ver_bac_uncertified_{rule}"] = 100 * v.bac_uncertified
        p = pairs.get((t.run, t.task))
        row["vs_run"] = p.base if p else ""
        row.update(_prefixed_estimates("vs_", p.metrics) if p else {})
        rows.append(row)
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: _csv_value(r.get(k, "")) for k in fields})
    return buf.getvalue()


def _csv_value(v: Any) -> Any:
    if isinstance(v, float):
        return "" if not math.isfinite(v) else f"{v:.6g}"
    return v


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    return obj


def to_json(report: Report) -> str:
    """Everything in the report; NaN becomes null."""
    doc = {
        "settings": asdict(report.settings),
        "runs": report.runs,
        "tasks": [asdict(t) for t in report.tasks],
        "pairs": [asdict(p) for p in report.pairs],
        "across_runs": [asdict(g) for g in report.across_runs],
        "across_pairs": [asdict(g) for g in report.across_pairs],
        "notes": report.notes,
    }
    return json.dumps(_jsonable(doc), indent=1, ensure_ascii=False)
