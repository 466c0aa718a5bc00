"""The leaderboard as one self-contained HTML page.

No network, no external file: the styles, the sorting script and the figures (PNG, base64) are
inside the page. Per kind of perturbation, a sortable table of the models (click a header), each
measure with a bar of its interval, the spread marked where it is within noise, the certified
share (n/a with the K it needs) and the plug-in estimate labelled with its K, the rank interval;
under it, per model, a drill-down to every task; then the paired model differences, the
certificates' held-back check and the figures. The script marks ``<body data-ready="1">``
once it has wired the tables, so a headless browser can tell the page ran.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from lm_eval_robust.report.compare import MEASURES, Comparison
from lm_eval_robust.report.leaderboard import (
    MEAN,
    STOCK_COLUMNS,
    STOCK_MEASURES,
    Cell,
    Leaderboard,
    LeaderboardRow,
    within_noise,
)
from lm_eval_robust.report.leaderboard_tables import stock_legend

__all__ = ["to_html"]

#: (measure, header, axis low, axis high, signed)
SHOWN: tuple[tuple[str, str, float, float, bool], ...] = (
    ("bac_clean", "clean BAC", 0.0, 100.0, False),
    ("bac_pert", "perturbed BAC", 0.0, 100.0, False),
    ("delta_drop", "δ_drop", -50.0, 50.0, True),
    ("bac_worst", "worst-case BAC", 0.0, 100.0, False),
    ("fmt_spread", "spread", 0.0, 60.0, False),
    ("consistency", "consistency", 0.0, 100.0, False),
    ("maj_share_clean", "majority (clean)", 0.0, 100.0, False),
)

#: axes of the stock metric's columns (:data:`STOCK_COLUMNS`): (axis low, axis high, signed)
STOCK_AXES: dict[str, tuple[float, float, bool]] = {
    "clean": (0.0, 100.0, False),
    "pert": (0.0, 100.0, False),
    "drop": (-50.0, 50.0, True),
    "worst": (0.0, 100.0, False),
}

STYLE = """
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#f3f3f3;cursor:pointer;user-select:none}
th.sorted-asc::after{content:" ▲"}th.sorted-desc::after{content:" ▼"}
td.l,th.l{text-align:left}
.bar{display:inline-block;vertical-align:middle;margin-left:6px}
.noise{color:#b35900;font-weight:bold}
.na{color:#888}
.ok{color:#1a7f37}.bad{color:#b42318}
details{margin:4px 0 10px 0}summary{cursor:pointer;color:#0550ae}
.note{color:#555;max-width:1100px}
img{max-width:100%;border:1px solid #eee}
"""

SCRIPT = """
function cellValue(td){const v=td.getAttribute('data-v');
  if(v===null||v===''){return null}const x=Number(v);return isNaN(x)?v:x}
function sortTable(th){const table=th.closest('table');const body=table.tBodies[0];
  const i=Array.from(th.parentNode.children).indexOf(th);
  const asc=!th.classList.contains('sorted-asc');
  table.querySelectorAll('th').forEach(h=>h.classList.remove('sorted-asc','sorted-desc'));
  th.classList.add(asc?'sorted-asc':'sorted-desc');
  const rows=Array.from(body.rows);
  rows.sort((a,b)=>{const x=cellValue(a.cells[i]),y=cellValue(b.cells[i]);
    if(x===null&&y===null)return 0;if(x===null)return 1;if(y===null)return -1;
    if(x<y)return asc?-1:1;if(x>y)return asc?1:-1;return 0});
  rows.forEach(r=>body.appendChild(r))}
document.querySelectorAll('table.sortable th')
  .forEach(th=>th.addEventListener('click',()=>sortTable(th)));
document.body.setAttribute('data-ready','1');
"""


def _e(x: object) -> str:
    return html.escape(str(x))


def _fmt(x: float, signed: bool = False) -> str:
    return f"{x:+.1f}" if signed else f"{x:.1f}"


def _bar(c: Cell, lo: float, hi: float, noise: float | None = None) -> str:
    """An inline SVG: the axis, the interval, the estimate, and the null's mean spread."""
    w, h = 52, 12

    def x(v: float) -> float:
        return max(0.0, min(float(w), (100 * v - lo) / (hi - lo) * w))

    parts = [f'<line x1="0" y1="6" x2="{w}" y2="6" stroke="#e5e5e5" stroke-width="2"/>']
    if lo < 0 < hi:
        z = (0 - lo) / (hi - lo) * w
        parts.append(f'<line x1="{z:.1f}" y1="1" x2="{z:.1f}" y2="11" stroke="#bbb"/>')
    if noise is not None and math.isfinite(noise):
        parts.append(
            f'<line x1="{x(noise):.1f}" y1="0" x2="{x(noise):.1f}" y2="12" stroke="#b35900" '
            'stroke-dasharray="2,1"/>'
        )
    if math.isfinite(c.low) and math.isfinite(c.high):
        parts.append(
            f'<line x1="{x(c.low):.1f}" y1="6" x2="{x(c.high):.1f}" y2="6" stroke="#0550ae" '
            'stroke-width="3"/>'
        )
    if math.isfinite(c.value):
        parts.append(f'<circle cx="{x(c.value):.1f}" cy="6" r="3" fill="#222"/>')
    return f'<svg class="bar" width="{w}" height="{h}">{"".join(parts)}</svg>'


def _stock_cells(r: LeaderboardRow, labels: Sequence[str]) -> str:
    out = []
    for label in labels:
        sc = r.stock.get(label)
        for stat in STOCK_COLUMNS:
            lo, hi, signed = STOCK_AXES[stat]
            c = sc.cells[stat] if sc is not None else Cell(math.nan, math.nan, math.nan)
            out.append(_value_cell(c, lo, hi, signed))
    return "".join(out)


def _value_cell(c: Cell, lo: float, hi: float, signed: bool) -> str:
    """A measure with its interval bar (no noise mark)."""
    if not math.isfinite(c.value):
        return '<td data-v=""><span class="na">–</span></td>'
    title = ""
    if math.isfinite(c.low) and math.isfinite(c.high):
        title = f"{_fmt(100 * c.low, signed)} to {_fmt(100 * c.high, signed)}"
    return (
        f'<td data-v="{100 * c.value:.4f}" title="{_e(title)}">{_fmt(100 * c.value, signed)}'
        f"{_bar(c, lo, hi)}</td>"
    )


def _measure_cell(r: LeaderboardRow, name: str, lo: float, hi: float, signed: bool) -> str:
    c = r.cells[name]
    if not math.isfinite(c.value):
        return '<td data-v=""><span class="na">–</span></td>'
    text = _fmt(100 * c.value, signed)
    title = ""
    if math.isfinite(c.low) and math.isfinite(c.high):
        title = f"{_fmt(100 * c.low, signed)} to {_fmt(100 * c.high, signed)}"
    noise = None
    mark = ""
    if name == "fmt_spread" and r.spread is not None:
        noise = r.spread.null_mean()
        p = r.spread.p_value()
        title += f"; with no variant effect {100 * noise:.1f} (p {p:.2f})"
        if within_noise(r):
            mark = ' <span class="noise" title="within noise">≈</span>'
    return (
        f'<td data-v="{100 * c.value:.4f}" title="{_e(title)}">{text}{mark}'
        f"{_bar(c, lo, hi, noise)}</td>"
    )


def _cert_cells(r: LeaderboardRow) -> str:
    out = []
    for rule in ("exact", "plugin_c"):
        c = r.certs.get(rule)
        if c is None:
            out.append('<td data-v=""><span class="na">–</span></td>')
        elif not c.available:
            need = c.reason.split("K >= ")[1].split(" ")[0] if "K >= " in c.reason else "?"
            out.append(
                f'<td data-v="" title="{_e(c.reason)}"><span class="na">n/a (K ≥ {need})'
                "</span></td>"
            )
        else:
            k = f" <small>(K = {c.k})</small>" if rule != "exact" else ""
            out.append(
                f'<td data-v="{100 * c.rate:.4f}" title="{100 * c.rate_low:.1f} to '
                f'{100 * c.rate_high:.1f}; {_e(c.verdict)}">{100 * c.rate:.1f}{k}</td>'
            )
    return "".join(out)


def _rank_cell(lb: Leaderboard, model: str, kind: str, measure: str) -> str:
    if lb.comparison is None:
        return '<td data-v="">–</td>'
    for rk in lb.comparison.ranks:
        if (rk.kind, rk.model, rk.measure) == (kind, model, measure):
            span = str(rk.low) if rk.low == rk.high else f"{rk.low}–{rk.high}"
            return f'<td data-v="{rk.rank}">{rk.rank} [{span}]</td>'
    return '<td data-v="">–</td>'


def _header(first: Sequence[str], stock: Sequence[str] = ()) -> str:
    cols = [*first, *(f"{lab} {h}" for lab in stock for h in STOCK_COLUMNS.values())]
    cols += [*(h for _, h, *_ in SHOWN), "certified (exact)", "plug-in p_C"]
    cols += [f"rank, {MEASURES[m]}" for m in MEASURES]
    cells = "".join(
        f'<th class="{"l" if i < len(first) else ""}">{_e(c)}</th>' for i, c in enumerate(cols)
    )
    return f"<thead><tr>{cells}</tr></thead>"


def _row(
    lb: Leaderboard,
    r: LeaderboardRow,
    first: Sequence[str],
    ranks: bool,
    stock: Sequence[str] = (),
) -> str:
    cells = "".join(f'<td class="l" data-v="{_e(v)}">{_e(v)}</td>' for v in first)
    cells += _stock_cells(r, stock)
    cells += "".join(_measure_cell(r, name, lo, hi, sg) for name, _, lo, hi, sg in SHOWN)
    cells += _cert_cells(r)
    for m in MEASURES:
        cells += _rank_cell(lb, r.model, r.kind, m) if ranks else '<td data-v=""></td>'
    return f"<tr>{cells}</tr>"


def _comparisons(
    lb: Leaderboard,
    comp: Comparison | None = None,
    names: Mapping[str, str] = MEASURES,
    title: str = "Model comparisons: paired differences on shared examples",
    table_id: str = "comparisons",
) -> str:
    """A comparison's pairs (by default the BAC measures' comparison)."""
    comp = lb.comparison if comp is None else comp
    if comp is None or not comp.pairs:
        return ""
    rows = []
    for p in comp.pairs:
        ci = (
            f" [{100 * p.low:+.1f}, {100 * p.high:+.1f}]"
            if math.isfinite(p.low) and math.isfinite(p.high)
            else ""
        )
        verdict = (
            '<span class="ok">distinguishable</span>'
            if p.distinguishable
            else '<span class="na">not distinguishable</span>'
        )
        rows.append(
            f'<tr><td class="l">{_e(p.kind)}</td><td class="l">{_e(names[p.measure])}</td>'
            f'<td class="l">{_e(p.model_a)}</td><td class="l">{_e(p.model_b)}</td>'
            f'<td data-v="{p.n_examples}">{p.n_examples}</td>'
            f'<td data-v="{100 * p.diff:.4f}">{100 * p.diff:+.1f}{ci}</td>'
            f'<td data-v="{p.p:.6f}">{p.p:.3f}</td><td data-v="{p.p_holm:.6f}">{p.p_holm:.3f}</td>'
            f'<td class="l">{verdict}</td></tr>'
        )
    head = "".join(
        f"<th{' class=l' if i < 4 or i == 8 else ''}>{h}</th>"
        for i, h in enumerate(
            ["kind", "measure", "A", "B", "examples", "A − B", "p", "p (Holm)", "verdict"]
        )
    )
    return (
        f"<h2>{_e(title)}</h2>"
        '<p class="note">A − B on the examples both models scored, mean over the tasks both '
        f"ran; {round(100 * lb.confidence)} % clustered BCa intervals ({comp.n_resamples} "
        "resamples, the same examples for both models); p two-sided from the bootstrap, "
        "Holm-adjusted over the model pairs of each kind and measure.</p>"
        f'<table class="sortable" id="{_e(table_id)}"><thead><tr>{head}</tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table>"
    )


def _certificates(lb: Leaderboard) -> str:
    rows = []
    for kind, m, c in lb.mean_certificates():
        if not c.available:
            rows.append(
                f'<tr><td class="l">{_e(kind)}</td><td class="l">{_e(m)}</td>'
                f'<td class="l">{_e(c.label)}</td><td class="l na" colspan="5">'
                f"{_e(c.reason)}</td></tr>"
            )
            continue
        cls = "bad" if c.flagged or c.doubtful else "ok"
        rows.append(
            f'<tr><td class="l">{_e(kind)}</td><td class="l">{_e(m)}</td>'
            f'<td class="l">{_e(c.label)}</td>'
            f"<td>{100 * c.rate:.1f} [{100 * c.rate_low:.1f}, {100 * c.rate_high:.1f}]</td>"
            f"<td>{100 * c.acc_certified:.1f} / {100 * c.acc_uncertified:.1f}</td>"
            f"<td>{100 * c.diff:+.1f} [{100 * c.diff_low:+.1f}, "
            f"{100 * c.diff_high:+.1f}]</td>"
            f"<td>{100 * c.share_below:.1f} (≤ {100 * c.share_below_bound:.1f})</td>"
            f'<td class="l {cls}">{_e(c.verdict)}</td></tr>'
        )
    head = "".join(
        f"<th{' class=l' if i < 3 or i == 7 else ''}>{h}</th>"
        for i, h in enumerate(
            [
                "kind", "model", "rule", "certified", "held-back acc. certified / uncertified",
                "difference", "certified below 1−φ", "verdict",
            ]
        )
    )  # fmt: skip
    return (
        "<h2>Certificates, checked on held-back variants</h2>"
        f'<p class="note">φ = {lb.phi}; rates averaged over {lb.n_splits} random '
        "estimation/held-back splits. <i>exact</i>: finite-sample certificate (exact binomial "
        f"bound, Benjamini–Hochberg at {lb.alpha}), n/a below the K it needs. <i>plug-in</i>: "
        "the paper's estimator at this run's K, without a finite-sample guarantee.</p>"
        f'<table class="sortable" id="certificates"><thead><tr>{head}</tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table>"
    )


def _md_inline(text: str) -> str:
    """Escaped text with Markdown's *emphasis* and `code` as HTML."""
    out = _e(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*([^*]+)\*", r"<i>\1</i>", out)


def to_html(lb: Leaderboard, figures: Sequence[Path] = ()) -> str:
    level = round(100 * lb.confidence)
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<title>Robustness leaderboard</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Robustness leaderboard</h1>",
        '<p class="note">One row per model: the mean over the tasks of each perturbation kind, '
        f"in %, with {level} % clustered BCa intervals ({lb.n_resamples} resamples). Bars: the "
        "interval (blue) and the estimate (dot); on the spread, the dashed orange line is the "
        "spread that variant labels permuted within examples give, and "
        '<span class="noise">≈</span> marks a spread within noise (p ≥ 0.05). Click a header to '
        "sort; open a model's drill-down for every task.</p>",
    ]
    legend = stock_legend(lb)
    if legend:
        parts.append(f'<p class="note">{_md_inline(legend)}</p>')
    for kind in lb.kinds:
        means = [r for m in lb.models if (r := lb.row(m, kind)) is not None]
        labels = lb.stock_labels(kind)
        parts.append(f"<h2>{_e(kind)} perturbations: mean over tasks</h2>")
        parts.append(f'<table class="sortable leaderboard" id="lb-{_e(kind)}">')
        parts.append(_header(["model", "tasks"], labels))
        parts.append("<tbody>")
        parts += [_row(lb, r, [r.model, str(r.n_tasks)], True, labels) for r in means]
        parts.append("</tbody></table>")
        for m in lb.models:
            tasks = [r for r in lb.rows if r.model == m and r.kind == kind and r.task != MEAN]
            if not tasks:
                continue
            parts.append(f"<details><summary>{_e(m)}: {len(tasks)} tasks</summary>")
            parts.append('<table class="sortable drill">')
            parts.append(_header(["task", "examples"], labels))
            parts.append("<tbody>")
            parts += [_row(lb, r, [r.task, str(r.n_examples)], False, labels) for r in tasks]
            parts.append("</tbody></table></details>")
    parts.append(_comparisons(lb))
    for i, (label, comp) in enumerate(lb.stock_comparison.items()):
        parts.append(
            _comparisons(
                lb,
                comp,
                {m: f"{label} {h}" for m, h in STOCK_MEASURES.items()},
                f"Model comparisons in the task's own metric ({label})",
                f"comparisons-stock-{i}",
            )
        )
    parts.append(_certificates(lb))
    for fig in figures:
        data = base64.b64encode(Path(fig).read_bytes()).decode("ascii")
        parts.append(f"<h2>{_e(Path(fig).stem.replace('_', ' '))}</h2>")
        parts.append(f'<img alt="{_e(Path(fig).name)}" src="data:image/png;base64,{data}">')
    if lb.notes:
        parts.append("<h2>Notes</h2><ul>")
        parts += [f"<li>{_e(n)}</li>" for n in lb.notes]
        parts.append("</ul>")
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"
