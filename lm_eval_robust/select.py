"""Target-task selection (paper, Section 4 and Appendix F.1): where is there an effect to study?

A model–task–perturbation triple is a *target* when the model is competent on clean prompts
(clean balanced accuracy ≥ ``min_clean_bac``, 70 % in the paper) and perturbations cost it
something (a drop of more than ``min_drop``, 1 point in the paper). Below chance-level competence a
drop says nothing; the table therefore shows, beside each filter, the clustered 95 % CI, the
majority-class share and the threshold-free margin AUC, and ranks the pairs by how close they come.

``lm-eval-robust select RUN`` reads an lm_eval output folder of our perturbed tasks (run with
``--log_samples``); ``--pretrained MODEL`` runs that pass first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from lm_eval_robust.errors import OneLineArgumentParser, UserError


@dataclass(frozen=True)
class Criteria:
    min_clean_bac: float = 0.70
    min_drop: float = 0.01
    significant: bool = False  # also require the drop's CI to exclude 0


@dataclass
class Candidate:
    task: str
    kind: str
    n_examples: int
    n_variants: int
    bac_clean: float
    bac_clean_ci: tuple[float, float]
    delta_drop: float
    delta_drop_ci: tuple[float, float]
    maj_share_clean: float
    auc_clean: float
    passes_clean: bool
    passes_drop: bool

    @property
    def target(self) -> bool:
        return self.passes_clean and self.passes_drop

    def distance(self, criteria: Criteria) -> float:
        """How far from passing both filters (0 for a target), as a BAC fraction."""
        gap_clean = max(0.0, criteria.min_clean_bac - self.bac_clean)
        gap_drop = max(0.0, self.delta_drop + criteria.min_drop)
        return gap_clean + gap_drop


def candidates(run_dir: str, criteria: Criteria, n_resamples: int = 2000) -> list[Candidate]:
    """Evaluate the filters on every task of one run (values as fractions)."""
    from lm_eval_robust.metrics.classification import auc_clean
    from lm_eval_robust.report.pairing import label_runs
    from lm_eval_robust.report.tables import ReportSettings, build_report

    runs = label_runs([run_dir], None)
    report = build_report(runs, ReportSettings(n_resamples=n_resamples))
    task_runs = runs[0].tasks
    out: list[Candidate] = []
    for t in report.tasks:
        bc, dd = t.metrics["bac_clean"], t.metrics["delta_drop"]
        drop_ok = dd.value / 100 < -criteria.min_drop
        if criteria.significant:
            drop_ok = drop_ok and dd.high / 100 < 0
        task_run = task_runs.get(t.task)
        auc = auc_clean(task_run.item_list()) if task_run is not None else math.nan
        c = Candidate(
            task=t.task,
            kind=t.kind,
            n_examples=t.n_examples,
            n_variants=t.n_variants,
            bac_clean=bc.value / 100,
            bac_clean_ci=(bc.low / 100, bc.high / 100),
            delta_drop=dd.value / 100,
            delta_drop_ci=(dd.low / 100, dd.high / 100),
            maj_share_clean=t.maj_share_clean / 100,
            auc_clean=auc,
            passes_clean=bc.value / 100 >= criteria.min_clean_bac,
            passes_drop=drop_ok,
        )
        out.append(c)
    return sorted(out, key=lambda c: (not c.target, c.distance(criteria), c.task))


def _fmt_ci(v: float, ci: tuple[float, float]) -> str:
    lo, hi = ci
    if math.isnan(lo):
        return f"{100 * v:.1f}"
    return f"{100 * v:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def to_markdown(rows: Sequence[Candidate], criteria: Criteria, model: str) -> str:
    lines = [
        f"# Target-task selection: {model}",
        "",
        f"Filters: clean BAC ≥ {100 * criteria.min_clean_bac:.0f} %, drop > "
        f"{100 * criteria.min_drop:.0f} point(s)"
        + (" with a 95 % CI excluding 0" if criteria.significant else "")
        + ". Values in percent, [95 % BCa CI, source examples resampled as clusters].",
        "",
        "| task | kind | n × K | BAC clean | δ_drop | maj. share clean | AUC clean | clean ok | "
        "drop ok | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.task.split('_')[0]} | {r.kind} | {r.n_examples} × "
            f"{round(r.n_variants / max(r.n_examples, 1))} | "
            f"{_fmt_ci(r.bac_clean, r.bac_clean_ci)} | {_fmt_ci(r.delta_drop, r.delta_drop_ci)} | "
            f"{100 * r.maj_share_clean:.0f} | {r.auc_clean:.2f} | "
            f"{'yes' if r.passes_clean else 'no'} | {'yes' if r.passes_drop else 'no'} | "
            f"{'**yes**' if r.target else 'no'} |"
        )
    targets = [r.task for r in rows if r.target]
    lines += [
        "",
        f"Targets: {', '.join(targets) if targets else 'none'}."
        + ("" if targets else " Closest to passing: " + ", ".join(r.task for r in rows[:3]) + "."),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    p = OneLineArgumentParser(
        prog="lm-eval-robust select",
        description="Apply the paper's target-task filters to a run of our perturbed tasks.",
    )
    p.add_argument("run", help="lm_eval --output_path folder (with --log_samples)")
    p.add_argument("--min-clean-bac", type=float, default=0.70)
    p.add_argument("--min-drop", type=float, default=0.01)
    p.add_argument("--significant", action="store_true", help="the drop's CI must exclude 0")
    p.add_argument("--resamples", type=int, default=2000)
    p.add_argument("-o", "--out", default=None, help="write targets JSON (+ .md beside it)")
    args = p.parse_args(list(argv))
    if not 0 <= args.min_clean_bac <= 1 or args.min_drop < 0:
        raise UserError("--min-clean-bac must be in [0, 1] and --min-drop >= 0 (fractions)")
    crit = Criteria(args.min_clean_bac, args.min_drop, args.significant)
    rows = candidates(args.run, crit, args.resamples)
    md = to_markdown(rows, crit, Path(args.run).name)
    print(md)
    if args.out:
        out = Path(args.out)
        if out.parent.exists() and not out.parent.is_dir():
            raise UserError(f"cannot write {out}: {out.parent} is a file; choose -o")
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "run": args.run,
            "criteria": asdict(crit),
            "targets": [r.task for r in rows if r.target],
            "table": [{**asdict(r), "target": r.target} for r in rows],
        }
        out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        out.with_suffix(".md").write_text(md, encoding="utf-8")
    return 0
