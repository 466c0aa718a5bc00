"""The leaderboard as tables: Markdown (percentages, the noise, certificate and comparison
sections), CSV (one row per model, kind and task) and JSON (everything, NaN as null). The numbers
are :mod:`lm_eval_robust.report.leaderboard`'s; nothing here computes a statistic.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from typing import Any

from lm_eval_robust.report.compare import MEASURES, Comparison
from lm_eval_robust.report.leaderboard import (
    COLUMNS,
    MEAN,
    STOCK_COLUMNS,
    STOCK_MEASURES,
    Cell,
    Leaderboard,
    LeaderboardRow,
    within_noise,
)
from lm_eval_robust.report.markdown import markdown_table
from lm_eval_robust.stats.cert_splits import RuleSummary
from lm_eval_robust.stats.robustness import BOOTSTRAP_STATS
from lm_eval_robust.stats.wrap_metrics import STOCK_STATS

__all__ = ["to_csv", "to_json", "to_markdown"]


def _pct(c: Cell, signed: bool = False) -> str:
    if not math.isfinite(c.value):
        return "–"
    v = f"{100 * c.value:+.1f}" if signed else f"{100 * c.value:.1f}"
    if math.isfinite(c.low) and math.isfinite(c.high):
        return f"{v} [{100 * c.low:.1f}, {100 * c.high:.1f}]"
    return v


def _rank(r: LeaderboardRow) -> float:
    """Sort key: higher perturbed BAC first; undefined last."""
    v = r.cells["bac_pert"].value
    return -v if math.isfinite(v) else math.inf


#: columns after :data:`COLUMNS`: the spread's null and the certificates
EXTRA_COLUMNS: tuple[str, ...] = (
    "spread with no variant effect (p)",
    "certified (exact)",
    "plug-in p_C (not a guarantee)",
)
NOISE_MARK = "≈"


def _p(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    return f"{x:.3f}" if x < 0.01 else f"{x:.2f}"


def _noise_cell(r: LeaderboardRow) -> str:
    if r.spread is None or not math.isfinite(r.spread.p_value()):
        return "–"
    return f"{100 * r.spread.null_mean():.1f} (p {_p(r.spread.p_value())})"


def _rate(c: RuleSummary | None, with_k: bool = False) -> str:
    if c is None:
        return "–"
    if not c.available:
        return (
            f"n/a (K ≥ {c.reason.split('K >= ')[1].split(' ')[0]})"
            if "K >= " in c.reason
            else "n/a"
        )
    v = f"{100 * c.rate:.1f}"
    if math.isfinite(c.rate_low) and math.isfinite(c.rate_high) and c.rate_high > c.rate_low:
        v += f" [{100 * c.rate_low:.1f}, {100 * c.rate_high:.1f}]"
    return v + (f" (K = {c.k})" if with_k else "")


def stock_headers(labels: tuple[str, ...]) -> list[str]:
    """``acc clean``, ``acc perturbed``, ... for each stock metric label."""
    return [f"{label} {h}" for label in labels for h in STOCK_COLUMNS.values()]


def _stock_cells(r: LeaderboardRow, labels: tuple[str, ...]) -> list[str]:
    out = []
    for label in labels:
        sc = r.stock.get(label)
        for stat in STOCK_COLUMNS:
            out.append("–" if sc is None else _pct(sc.cells[stat], signed=stat == "drop"))
    return out


def stock_legend(lb: Leaderboard) -> str:
    """What the stock columns are, or "" when no task of the runs reports its own metric."""
    labels = lb.stock_labels()
    if not labels:
        return ""
    names = ", ".join(f"*{label}*" for label in labels)
    text = (
        f"{names}: the task's own metric as lm-eval computes it for the stock task, per prompt "
        "(a wrapped task `<task>_robust_format` / `_robust_text`), on the clean prompts, on the "
        "perturbed prompts, their drop (perturbed − clean; negative: worse under perturbation) "
        "and the worst case (per example the worst of its clean and perturbed prompts, "
        "averaged), with the same clustered intervals as the BAC columns; a mean row averages "
        "only the tasks of that metric. BAC beside it is over the task's labels where every doc "
        "has the same ones, over the answer slots where choices differ per doc."
    )
    listed = lb.stock_listed()
    if listed:
        text += (
            " Tasks reporting several metrics show the first lm-eval lists: "
            + "; ".join(f"{t}: {listed[t][0]} (of {', '.join(listed[t])})" for t in listed)
            + "."
        )
    return text


def _row_cells(r: LeaderboardRow) -> list[str]:
    cells = [_pct(r.cells[k], signed=k == "delta_drop") for k in COLUMNS]
    if within_noise(r):
        cells[list(COLUMNS).index("fmt_spread")] += f" {NOISE_MARK}"
    return [
        *cells,
        _noise_cell(r),
        _rate(r.certs.get("exact")),
        _rate(r.certs.get("plugin_c"), with_k=True),
    ]


def _noise_section(lb: Leaderboard) -> list[str]:
    """Best, worst and spread of each mean row beside what permuted variant labels give."""
    body = []
    for kind in lb.kinds:
        for m in lb.models:
            r = lb.row(m, kind)
            if r is None or r.spread is None:
                continue
            cells = [kind, m]
            for name in ("fmt_best", "fmt_worst", "fmt_spread"):
                obs = r.cells[name].value
                null = r.spread.null_mean(name)
                cells.append(
                    f"{100 * obs:.1f} vs {100 * null:.1f} (p {_p(r.spread.p_value(name))})"
                    if math.isfinite(obs) and math.isfinite(null)
                    else "–"
                )
            cells.append("within noise" if within_noise(r) else "above noise")
            body.append(cells)
    if not body:
        return []
    return [
        "",
        "## Best, worst and spread against noise: mean over tasks",
        "",
        f"Observed vs the mean of {lb.n_permutations} draws with the variant labels permuted "
        "within each example (no variant effect, same examples); one-sided p (best and spread: "
        "as large or larger; worst: as small or smaller).",
        "",
        markdown_table(
            ["kind", "model", "best variant", "worst variant", "spread", "spread is"], body
        ),
    ]


def _cert_section(lb: Leaderboard) -> list[str]:
    header = [
        "kind", "model", "rule", "certified", "single-split range", "held-back acc. certified",
        "uncertified", "certified − uncertified", "certified below 1−φ", "verdict",
    ]  # fmt: skip
    body = []
    for kind, m, c in lb.mean_certificates():
        if not c.available:
            body.append([kind, m, c.label, c.reason, "", "", "", "", "", "n/a"])
            continue
        diff = f"{100 * c.diff:+.1f}" if math.isfinite(c.diff) else "–"
        if math.isfinite(c.diff_low):
            diff += f" [{100 * c.diff_low:+.1f}, {100 * c.diff_high:+.1f}]"
        body.append(
            [
                kind,
                m,
                c.label,
                _rate(c),
                f"{100 * c.split_min:.1f}–{100 * c.split_max:.1f}",
                "–" if not math.isfinite(c.acc_certified) else f"{100 * c.acc_certified:.1f}",
                "–" if not math.isfinite(c.acc_uncertified) else f"{100 * c.acc_uncertified:.1f}",
                diff,
                "–"
                if not math.isfinite(c.share_below)
                else f"{100 * c.share_below:.1f} (≤ {100 * c.share_below_bound:.1f})",
                c.verdict,
            ]
        )
    return [
        "",
        "## Certificates: mean over tasks, checked on held-back variants",
        "",
        f"φ = {lb.phi}; rates averaged over {lb.n_splits} random estimation/held-back splits of "
        "each example's variants, the interval redrawing examples and the split. *exact*: the "
        "finite-sample certificate (exact binomial bound on the example's accuracy under "
        f"perturbation, Benjamini–Hochberg at {lb.alpha}; n/a below the K it needs). *plug-in*: "
        "the paper's estimator (box = sample range of the estimation shifts, ε_B = 0) at this "
        "run's K, an estimate with no finite-sample guarantee. The check pools the held-back "
        "variants over the splits; *selects*: certified minus uncertified held-back accuracy "
        "has an interval above 0; *fails its promise*: the certified examples' held-back "
        "accuracy has an interval below 1 − φ; *promise in doubt*: its point estimate is below "
        "1 − φ, or more certified examples fall below 1 − φ on their held-back variants than "
        "certificates all exactly at 1 − φ would (the bound in brackets).",
        "",
        markdown_table(header, body),
    ]


def _comparison_section(
    lb: Leaderboard,
    comp: Comparison | None = None,
    names: Mapping[str, str] = MEASURES,
    title: str = "Model comparisons: paired differences on shared examples",
) -> list[str]:
    """A comparison's pairs and rank intervals (by default the BAC measures' comparison)."""
    comp = lb.comparison if comp is None else comp
    if comp is None or not comp.pairs:
        return []
    level = round(100 * lb.confidence)
    parts = [
        "",
        f"## {title}",
        "",
        f"A − B, mean over the tasks both ran, on the examples both scored; {level} % clustered "
        f"BCa intervals ({comp.n_resamples} resamples, the same examples drawn for both models); "
        f"p two-sided from the bootstrap, Holm-adjusted over the model pairs of each kind and "
        f"measure. *distinguishable*: Holm-adjusted p < {comp.level:.2f}. Rank intervals: "
        "[1 + models distinguishably better, M − models distinguishably worse].",
        "",
    ]
    header = ["kind", "measure", "A", "B", "examples", "A − B", "p", "p (Holm)", "verdict"]
    body = []
    for p in comp.pairs:
        d = f"{100 * p.diff:+.1f}"
        if math.isfinite(p.low):
            d += f" [{100 * p.low:+.1f}, {100 * p.high:+.1f}]"
        body.append(
            [
                p.kind,
                names[p.measure],
                p.model_a,
                p.model_b,
                str(p.n_examples),
                d,
                _p(p.p),
                _p(p.p_holm),
                "distinguishable" if p.distinguishable else "not distinguishable",
            ]
        )
    parts.append(markdown_table(header, body))
    parts += ["", "Rank intervals (1 = most robust):", ""]
    header = ["kind", "model", *names.values()]
    body = []
    for kind in lb.kinds:
        for m in lb.models:
            cells = []
            for meas in names:
                hit = [r for r in comp.ranks if (r.kind, r.model, r.measure) == (kind, m, meas)]
                if not hit:
                    cells.append("–")
                    continue
                r = hit[0]
                rng = str(r.low) if r.low == r.high else f"{r.low}–{r.high}"
                cells.append(f"{r.rank} [{rng}]")
            body.append([kind, m, *cells])
    parts.append(markdown_table(header, body))
    return parts


def to_markdown(lb: Leaderboard) -> str:
    level = round(100 * lb.confidence)
    design = sorted({d for v in lb.designs.values() for d in v.split("+")})
    parts = [
        "# Robustness leaderboard",
        "",
        f"One row per model: the mean over the tasks of each perturbation kind, in %, with "
        f"{level} % clustered BCa intervals ({lb.n_resamples} resamples; examples resampled with "
        f"all their variants, tasks independently). Design: {', '.join(design)}. "
        "Variant = prompt format (format perturbations) or text-perturbation kind (text). "
        f"{NOISE_MARK}: the spread is within noise, i.e. variant labels permuted within examples "
        f"({lb.n_permutations} draws) give a spread as large with p ≥ 0.05; the column beside it "
        "is that null's mean spread. The certified share is the finite-sample certificate "
        "(n/a below the K it needs); the paper's plug-in estimate is labelled with its K.",
    ]
    legend = stock_legend(lb)
    if legend:
        parts += ["", legend]
    for kind in lb.kinds:
        rows = [r for m in lb.models if (r := lb.row(m, kind)) is not None]
        rows.sort(key=_rank)
        labels = lb.stock_labels(kind)
        parts += ["", f"## {kind} perturbations: mean over tasks", ""]
        header = [
            "model", "tasks", "examples", *stock_headers(labels), *COLUMNS.values(),
            *EXTRA_COLUMNS,
        ]  # fmt: skip
        parts.append(
            markdown_table(
                header,
                [
                    [
                        r.model,
                        str(r.n_tasks),
                        str(r.n_examples),
                        *_stock_cells(r, labels),
                        *_row_cells(r),
                    ]
                    for r in rows
                ],
            )
        )
    parts += ["", "## Per task", ""]
    labels = lb.stock_labels()
    header = [
        "kind", "task", "model", "examples", "prompts", *stock_headers(labels),
        *COLUMNS.values(), *EXTRA_COLUMNS,
    ]  # fmt: skip
    body = []
    for kind in lb.kinds:
        tasks = sorted({r.task for r in lb.rows if r.kind == kind and r.task != MEAN})
        for task in tasks:
            for m in lb.models:
                r = lb.row(m, kind, task)
                if r is not None:
                    body.append(
                        [
                            kind,
                            task,
                            m,
                            str(r.n_examples),
                            str(r.n_prompts),
                            *_stock_cells(r, labels),
                            *_row_cells(r),
                        ]
                    )
    parts.append(markdown_table(header, body))
    parts += _noise_section(lb)
    parts += _cert_section(lb)
    parts += _comparison_section(lb)
    for label, comp in lb.stock_comparison.items():
        parts += _comparison_section(
            lb,
            comp,
            {m: f"{label} {h}" for m, h in STOCK_MEASURES.items()},
            f"Model comparisons in the task's own metric ({label}): paired differences on "
            "shared examples",
        )
    if lb.notes:
        parts += ["", "Notes:", ""] + [f"- {n}" for n in lb.notes]
    return "\n".join(parts) + "\n"


def _csv_row(r: LeaderboardRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": r.model,
        "kind": r.kind,
        "task": r.task,
        "n_tasks": r.n_tasks,
        "n_examples": r.n_examples,
        "n_prompts": r.n_prompts,
    }
    for name in BOOTSTRAP_STATS:
        c = r.cells[name]
        for suffix, x in (("", c.value), ("_low", c.low), ("_high", c.high)):
            out[name + suffix] = x if math.isfinite(x) else None
    for sc in r.stock.values():  # the results JSON's names: stock_acc_clean[,filter]
        flt = "" if sc.filter == "none" else f",{sc.filter}"
        for stat in STOCK_STATS:
            c = sc.cells[stat]
            for suffix, x in (("", c.value), ("_low", c.low), ("_high", c.high)):
                out[f"stock_{sc.metric}_{stat}{suffix}{flt}"] = _clean(x)
        out[f"stock_{sc.metric}_tasks{flt}"] = sc.n_tasks
    if r.spread is not None:
        out |= r.spread.as_dict()
    for rule, rs in sorted(r.certs.items()):
        out[f"cert_{rule}"] = _clean(rs.rate) if rs.available else None
        out[f"cert_{rule}_low"] = _clean(rs.rate_low) if rs.available else None
        out[f"cert_{rule}_high"] = _clean(rs.rate_high) if rs.available else None
        out[f"cert_{rule}_k"] = rs.k
        out[f"cert_{rule}_na"] = rs.reason
    return out


def to_csv(lb: Leaderboard) -> str:
    rows = [_csv_row(r) for r in lb.rows]
    fields = list(dict.fromkeys(k for r in rows for k in r))  # rows may lack a rule's columns
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return buf.getvalue()


def _clean(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _comparison_json(comp: Comparison | None) -> dict[str, Any] | None:
    if comp is None:
        return None
    return {
        "level": comp.level,
        "n_resamples": comp.n_resamples,
        "pairs": [
            {k: (_clean(v) if isinstance(v, float) else v) for k, v in p.__dict__.items()}
            for p in comp.pairs
        ],
        "ranks": [
            {k: (_clean(v) if isinstance(v, float) else v) for k, v in r.__dict__.items()}
            for r in comp.ranks
        ],
    }


def _stock_json(r: LeaderboardRow) -> dict[str, Any]:
    return {
        label: {
            "metric": sc.metric,
            "filter": sc.filter,
            "listed": list(sc.listed),
            "n_tasks": sc.n_tasks,
            "metrics": {stat: sc.cells[stat].as_dict() for stat in STOCK_STATS},
        }
        for label, sc in r.stock.items()
    }


def to_json(lb: Leaderboard) -> str:
    doc = {
        "confidence": lb.confidence,
        "n_resamples": lb.n_resamples,
        "models": list(lb.models),
        "kinds": list(lb.kinds),
        "designs": dict(sorted(lb.designs.items())),
        "rows": [
            {
                **{k: v for k, v in _csv_row(r).items() if k in ("model", "kind", "task")},
                "n_tasks": r.n_tasks,
                "n_examples": r.n_examples,
                "n_prompts": r.n_prompts,
                "metrics": {n: r.cells[n].as_dict() for n in BOOTSTRAP_STATS},
                "variant_bac": dict(sorted(r.variants.items())),
                "spread_null": r.spread.as_dict() if r.spread is not None else None,
                "certificates": {k: c.as_dict() for k, c in sorted(r.certs.items())},
                **({"stock": _stock_json(r)} if r.stock else {}),
            }
            for r in lb.rows
        ],
        "certificate_settings": {
            "phi": lb.phi,
            "alpha": lb.alpha,
            "n_splits": lb.n_splits,
        },
        "n_permutations": lb.n_permutations,
        "comparison": _comparison_json(lb.comparison),
        **(
            {
                "stock_comparison": {
                    label: _comparison_json(c) for label, c in lb.stock_comparison.items()
                }
            }
            if lb.stock_comparison
            else {}
        ),
        "notes": list(lb.notes),
    }
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"
