"""Target-task selection (paper, Section 4 and Appendix F.1): where is there an effect to study?

A model–task–perturbation triple is a *target* when the model is competent on clean prompts
(clean balanced accuracy ≥ ``min_clean_bac``, 70 % in the paper) and perturbations cost it
something (a drop of more than ``min_drop``, 1 point in the paper). Below chance-level competence a
drop says nothing; the table therefore shows, beside each filter, the clustered 95 % CI, the
majority-class share and the threshold-free margin AUC, and ranks the pairs by how close they come.

``lm-eval-robust select RUN [RUN ...]`` (:mod:`lm_eval_robust.cli.select`) reads lm_eval output
folders of our perturbed tasks (run with ``--log_samples``); ``lm-eval-robust select --pretrained
MODEL`` runs that pass first: the clean and a small perturbed pass of every task
(:data:`PASS_TASKS`, :data:`PASS_METADATA`, both overridable) through ``debiased_hf``, into
``--output_path``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lm_eval_robust.base.errors import UserError

# the screening pass --pretrained runs: every NI task, both kinds; 40 examples give 14 test
# examples, each with its clean prompt and 2 perturbed variants (about 840 prompts in all)
PASS_TASKS = "ni_format_pert,ni_text_pert"
PASS_METADATA = '{"n_examples": 40, "n_perturbations": 2}'


@dataclass(frozen=True)
class Criteria:
    min_clean_bac: float = 0.70
    min_drop: float = 0.01
    # also require the drop's whole CI beyond the threshold: a drop of more than min_drop,
    # established at the CI's level (min_drop = 0: the CI excludes 0)
    significant: bool = False


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
    style: str = "plain"  # the prompt style of the run the row comes from

    @property
    def target(self) -> bool:
        return self.passes_clean and self.passes_drop

    def distance(self, criteria: Criteria) -> float:
        """How far from passing both filters (0 for a target), as a BAC fraction."""
        gap_clean = max(0.0, criteria.min_clean_bac - self.bac_clean)
        gap_drop = max(0.0, self.delta_drop + criteria.min_drop)
        return gap_clean + gap_drop


def candidates(
    run_dirs: str | Sequence[str], criteria: Criteria, n_resamples: int = 2000
) -> list[Candidate]:
    """Evaluate the filters on every task of one or more runs (values as fractions).

    Several runs (e.g. full-size reruns of a pilot's targets, one folder per task) are read as
    one table; a task in two of them with the same prompt style is an error, since the two would
    disagree (in two styles it is two rows).
    """
    from lm_eval_robust.report.estimates import (
        ReportSettings,
        TaskSummary,
        build_report,
        prompt_style,
    )
    from lm_eval_robust.stats.classification import auc_clean
    from lm_eval_robust.values.pairing import label_runs

    paths = [run_dirs] if isinstance(run_dirs, str) else list(run_dirs)
    runs = label_runs(paths, None)
    styles = [prompt_style(run.results) for run in runs]
    seen: dict[tuple[str, str], str] = {}
    for path, run, style in zip(paths, runs, styles, strict=True):
        for task in run.tasks:
            if (task, style) in seen:
                raise UserError(
                    f"{task} ({style} prompts) is in both {seen[(task, style)]} and {path}; "
                    "give one run per task and prompt style"
                )
            seen[(task, style)] = path
    settings = ReportSettings(n_resamples=n_resamples, n_splits=0)  # no certificate rates
    summaries: list[tuple[TaskSummary, Any, str]] = []
    for run, style in zip(runs, styles, strict=True):
        report = build_report([run], settings)
        summaries += [(t, run.tasks.get(t.task), style) for t in report.tasks]
    out: list[Candidate] = []
    for t, task_run, style in summaries:
        bc, dd = t.metrics["bac_clean"], t.metrics["delta_drop"]
        drop_ok = dd.value / 100 < -criteria.min_drop
        if criteria.significant:
            drop_ok = drop_ok and dd.high / 100 < -criteria.min_drop
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
            style=style,
        )
        out.append(c)
    return sorted(out, key=lambda c: (not c.target, c.distance(criteria), c.task))


def target_tasks(rows: Sequence[Candidate]) -> list[str]:
    """The target tasks, each once (a task can pass in two prompt styles), in table order."""
    return list(dict.fromkeys(r.task for r in rows if r.target))


def read_task_list(value: str) -> list[str]:
    """Tasks from a comma list, or from a targets JSON file that ``select -o`` wrote."""
    if value.endswith(".json"):
        from lm_eval_robust.base.validate import read_bytes

        path = Path(value)
        raw = read_bytes(path, "targets file", "write it with select -o", UserError)
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise UserError(f"{path}: not UTF-8 text; write it again with select -o") from None
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{path}: not valid JSON ({exc.msg}); write it again with select"
            ) from None
        targets = data.get("targets") if isinstance(data, dict) else None
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise UserError(f"{path} has no 'targets' list of task names; is it select's output?")
        if not targets:
            raise UserError(f"{path}: no task passed the filters, so there is nothing to take")
        return list(targets)
    tasks = [t.strip() for t in value.split(",") if t.strip()]
    if not tasks:
        raise UserError(f"no task names in {value!r}; give a comma list or a targets .json file")
    return tasks


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
        + (" with the whole 95 % CI beyond it" if criteria.significant else "")
        + ". Values in percent, [95 % BCa CI, source examples resampled as clusters].",
        "",
        "| task | kind | style | n × K | BAC clean | δ_drop | maj. share clean | AUC clean | "
        "clean ok | drop ok | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.task.split('_')[0]} | {r.kind} | {r.style} | {r.n_examples} × "
            f"{round(r.n_variants / max(r.n_examples, 1))} | "
            f"{_fmt_ci(r.bac_clean, r.bac_clean_ci)} | {_fmt_ci(r.delta_drop, r.delta_drop_ci)} | "
            f"{100 * r.maj_share_clean:.0f} | {r.auc_clean:.2f} | "
            f"{'yes' if r.passes_clean else 'no'} | {'yes' if r.passes_drop else 'no'} | "
            f"{'**yes**' if r.target else 'no'} |"
        )
    targets = target_tasks(rows)
    lines += [
        "",
        f"Targets: {', '.join(targets) if targets else 'none'}."
        + ("" if targets else " Closest to passing: " + ", ".join(r.task for r in rows[:3]) + "."),
    ]
    return "\n".join(lines) + "\n"
