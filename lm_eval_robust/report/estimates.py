"""Robustness and debiasing metrics per task with clustered BCa CIs, gathered in a :class:`Report`.

All numbers are in percent (the paper's units). One run, per task:

* ``bac_clean``, ``bac_pert``: balanced accuracy of the clean prompts / perturbed variants;
  ``delta_drop = bac_pert - bac_clean`` (negative: perturbations hurt, the paper's sign);
  ``bac_all``: BAC over clean and perturbed docs pooled; majority-class shares of the
  predictions beside every drop (a collapsed model shows a high share and BAC near 50);
* ``p_c``, ``p_h``: per-example certification rates; ``P_c``, ``P_h``: population guarantees
  (:mod:`lm_eval_robust.stats.certify`).

Two runs (base, other = e.g. debiased), paired by example:

* ``delta_clean = bac_clean' - bac_clean``, ``delta_pert = bac_pert' - bac_pert``;
* ``p_damage = 100 (bac_clean - bac_pert)/bac_clean`` (base);
  ``p_recover = 100 delta_pert/(bac_clean - bac_pert)``; ``p_clean = 100 delta_clean/bac_clean``;
  ``p_combined = 100 (bac_all' - bac_all)/bac_all`` (the pooled docs: with K variants per
  example the clean prompts weigh 1/(K+1), which reproduces the paper's Table 10);
  a denominator within 1e-9 of 0 gives NaN and a note;
* ``d_p_c``, ``d_p_h``, ``d_P_c``, ``d_P_h``: certification after minus before.

Every value has a 95% BCa CI from a cluster bootstrap over source examples (an example's clean
prompt and all its variants move together; both runs are resampled with the same clusters).
Across tasks, the task-level mean gets a BCa CI from bootstrapping the tasks (Tables 10-11).
The report is rendered as Markdown, CSV and JSON by :mod:`lm_eval_robust.report.tables`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lm_eval_robust.base.defaults import DEFAULT_RESAMPLES
from lm_eval_robust.scoring.correction import correction_key
from lm_eval_robust.stats.bootstrap import (
    TaskLevelCI,
    bac_from_counts,
    cluster_bootstrap_ci,
    linear_stat,
    task_level_ci,
)
from lm_eval_robust.stats.cert_splits import RuleSummary, split_flags, summarize
from lm_eval_robust.stats.certificate_checks import (
    CertificateCheck,
    Verification,
    certificate_checks,
    verification,
)
from lm_eval_robust.stats.certificates import CertConfig, Certification, certify
from lm_eval_robust.stats.classification import majority_share
from lm_eval_robust.stats.margins import MarginTable
from lm_eval_robust.values.pairing import PairedTask, Run, TaskRun, pair_runs
from lm_eval_robust.values.ties import pred_shares

__all__ = [
    "LABELS",
    "PAIR_METRICS",
    "RUN_METRICS",
    "Estimate",
    "GroupSummary",
    "PairSummary",
    "Report",
    "ReportSettings",
    "TaskSummary",
    "build_report",
    "prompt_style",
    "summarize_pair",
    "summarize_task",
]

RUN_METRICS: tuple[str, ...] = (
    "bac_clean",
    "bac_pert",
    "delta_drop",
    "bac_all",
    "p_c",
    "p_h",
    "P_c",
    "P_h",
)
PAIR_METRICS: tuple[str, ...] = (
    "delta_clean",
    "delta_pert",
    "p_damage",
    "p_recover",
    "p_clean",
    "p_combined",
    "d_p_c",
    "d_p_h",
    "d_P_c",
    "d_P_h",
)
LABELS: dict[str, str] = {
    "bac_clean": "BAC clean",
    "bac_pert": "BAC pert",
    "delta_drop": "δ_drop",
    "bac_all": "BAC all",
    "p_c": "p_C",
    "p_h": "p_H",
    "P_c": "P_C",
    "P_h": "P_H",
    "delta_clean": "δ_clean",
    "delta_pert": "δ_pert",
    "p_damage": "p_damage",
    "p_recover": "p_recover",
    "p_clean": "p_clean",
    "p_combined": "p_combined",
    "d_p_c": "Δp_C",
    "d_p_h": "Δp_H",
    "d_P_c": "ΔP_C",
    "d_P_h": "ΔP_H",
}
TOL = 1e-9


@dataclass(frozen=True)
class ReportSettings:
    n_resamples: int = DEFAULT_RESAMPLES
    confidence: float = 0.95
    seed: int = 0
    cert: CertConfig = field(default_factory=CertConfig)
    #: random estimation/held-back splits for the certificate rates (0: leave them out)
    n_splits: int = 50
    #: the finite-sample certificate's error level
    alpha: float = 0.05


@dataclass(frozen=True)
class Estimate:
    """A value (percent) and its CI; NaN bounds where no interval exists."""

    value: float
    low: float = math.nan
    high: float = math.nan


@dataclass(frozen=True, eq=False)
class TaskSummary:
    run: str
    model: str
    task: str
    kind: str
    split: str
    n_examples: int
    n_variants: int
    metrics: dict[str, Estimate]
    maj_share_clean: float
    maj_share_pert: float
    verification: dict[str, Verification]
    notes: tuple[str, ...] = ()
    # share of docs (clean and perturbed) whose top label scores tie exactly (percent)
    tie_share: float = math.nan
    # every certificate estimator with its check on the held-back variants
    checks: tuple[CertificateCheck, ...] = ()
    # the applied correction's fit summary (method, lam, p_eps_V, p_eps_L on the train features)
    fit: dict[str, Any] = field(default_factory=dict)
    # every certificate rule over repeated splits, with its held-back check (cert_splits)
    cert_splits: dict[str, RuleSummary] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class PairSummary:
    base: str
    other: str
    task: str
    kind: str
    split: str
    metrics: dict[str, Estimate]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class GroupSummary:
    """Task-level means across the tasks of one run (or one pair) and one perturbation kind."""

    label: str
    kind: str
    metrics: dict[str, TaskLevelCI]


@dataclass(frozen=True, eq=False)
class Report:
    settings: ReportSettings
    runs: list[dict[str, Any]]
    tasks: list[TaskSummary]
    pairs: list[PairSummary]
    across_runs: list[GroupSummary]
    across_pairs: list[GroupSummary]
    notes: list[str]


# --------------------------------------------------------------------------------------------
# Per-task sufficient statistics (one row per source example)


@dataclass(frozen=True, eq=False)
class _RunData:
    table: MarginTable
    cert: Certification
    suff: np.ndarray  # [E, 4Q + 3]

    @property
    def q(self) -> int:
        return self.table.n_classes


def _run_data(task: TaskRun, config: CertConfig) -> _RunData:
    table = MarginTable.from_items(task.item_list())
    cert = certify(table, config)
    e = table.n_examples
    onehot, clean_ok, var_ok = table.gold_onehot(), table.clean_correct(), table.var_correct()
    pc = np.bincount(table.var_example, weights=var_ok, minlength=e)
    pn = np.bincount(table.var_example, minlength=e).astype(float)
    elig = cert.eligible.astype(float)
    suff = np.hstack(
        [
            onehot * clean_ok[:, None],
            onehot * table.has_clean[:, None],
            onehot * pc[:, None],
            onehot * pn[:, None],
            (cert.certified_c & cert.eligible).astype(float)[:, None],
            (cert.certified_h & cert.eligible).astype(float)[:, None],
            elig[:, None],
        ]
    )
    return _RunData(table, cert, suff)


def _population(s: np.ndarray, m: np.ndarray, phi: float, psi: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        lb = s / m - np.sqrt(np.log(2.0 / psi) / (2.0 * m))
        return np.where(m > 0, (1.0 - phi) * np.maximum(0.0, lb), np.nan)


def _run_derive(
    q: int, ok_c: bool, ok_h: bool, config: CertConfig
) -> Callable[[np.ndarray], np.ndarray]:
    """Weighted totals ``[b, 4Q + 3]`` -> the RUN_METRICS in percent ``[b, 8]``."""

    def derive(t: np.ndarray) -> np.ndarray:
        cc, cn, pc, pn = (t[:, i * q : (i + 1) * q] for i in range(4))
        s_c, s_h, m = t[:, 4 * q], t[:, 4 * q + 1], t[:, 4 * q + 2]
        clean = bac_from_counts(cc, cn)
        pert = bac_from_counts(pc, pn)
        pooled = bac_from_counts(cc + pc, cn + pn)
        with np.errstate(divide="ignore", invalid="ignore"):
            p_c = np.where(ok_c & (m > 0), s_c / m, np.nan)
            p_h = np.where(ok_h & (m > 0), s_h / m, np.nan)
        big_c = np.where(ok_c, _population(s_c, m, config.phi, config.psi), np.nan)
        big_h = np.where(ok_h, _population(s_h, m, config.phi, config.psi), np.nan)
        cols = [clean, pert, pert - clean, pooled, p_c, p_h, big_c, big_h]
        return 100.0 * np.stack(cols, axis=1)

    return derive


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.abs(den) > TOL * 100.0, 100.0 * num / den, np.nan)


def _pair_from_runs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """RUN_METRICS of base ``a`` and other ``b`` ``[n, 8]`` (percent) -> PAIR_METRICS."""
    i = {m: k for k, m in enumerate(RUN_METRICS)}
    damage = a[:, i["bac_clean"]] - a[:, i["bac_pert"]]
    d_clean = b[:, i["bac_clean"]] - a[:, i["bac_clean"]]
    d_pert = b[:, i["bac_pert"]] - a[:, i["bac_pert"]]
    cols = [
        d_clean,
        d_pert,
        _ratio(damage, a[:, i["bac_clean"]]),
        _ratio(d_pert, damage),
        _ratio(d_clean, a[:, i["bac_clean"]]),
        _ratio(b[:, i["bac_all"]] - a[:, i["bac_all"]], a[:, i["bac_all"]]),
        b[:, i["p_c"]] - a[:, i["p_c"]],
        b[:, i["p_h"]] - a[:, i["p_h"]],
        b[:, i["P_c"]] - a[:, i["P_c"]],
        b[:, i["P_h"]] - a[:, i["P_h"]],
    ]
    return np.stack(cols, axis=1)


def _task_seed(settings: ReportSettings, task: str) -> np.random.Generator:
    return np.random.default_rng([settings.seed, zlib.crc32(task.encode())])


def _estimates(names: Sequence[str], ci: Any) -> dict[str, Estimate]:
    return {
        n: Estimate(float(ci.estimate[k]), float(ci.low[k]), float(ci.high[k]))
        for k, n in enumerate(names)
    }


def _ci_notes(names: Sequence[str], ci: Any, n_resamples: int) -> list[str]:
    notes = []
    for k, n in enumerate(names):
        bad = int(ci.invalid[k])
        if math.isfinite(ci.estimate[k]) and bad:
            notes.append(
                f"{LABELS[n]}: undefined in {100.0 * bad / n_resamples:.1f}% of resamples"
                + (" (no CI)" if math.isnan(ci.low[k]) else " (left out of the CI)")
            )
    return notes


def _verifications(cert: Certification) -> dict[str, Verification]:
    """Verification per rule, for the rules that can certify at all on this task."""
    return {rule: verification(cert, rule) for rule in ("c", "h") if cert.computable(rule)}


def summarize_task(run: Run, task: TaskRun, settings: ReportSettings) -> TaskSummary:
    """The RUN_METRICS of one task of one run with clustered BCa CIs."""
    data = _run_data(task, settings.cert)
    cert, table = data.cert, data.table
    notes = [f"certificates: {cert.note}"] if cert.note else []
    derive = _run_derive(data.q, cert.computable("c"), cert.computable("h"), settings.cert)
    if table.n_examples >= 2:
        ci = cluster_bootstrap_ci(
            linear_stat(data.suff, derive),
            table.n_examples,
            n_resamples=settings.n_resamples,
            confidence=settings.confidence,
            seed=_task_seed(settings, task.task),
        )
        metrics = _estimates(RUN_METRICS, ci)
        notes += _ci_notes(RUN_METRICS, ci, settings.n_resamples)
    else:
        point = derive(data.suff.sum(axis=0, keepdims=True))[0]
        metrics = {n: Estimate(float(point[k])) for k, n in enumerate(RUN_METRICS)}
        notes.append("fewer than 2 examples: no CIs")
    if "holdout" not in task.split:
        notes.append(f"P_C/P_H on the {task.split or '?'} split (the paper uses *_holdout tasks)")
    clean_shares = pred_shares(table.clean_ll[table.has_clean])
    n_docs = int(table.has_clean.sum()) + int(table.var_example.shape[0])
    n_tied = int(table.clean_tied().sum()) + int(table.var_tied().sum())
    if n_tied:
        notes.append(
            f"{n_tied} of {n_docs} docs have exactly tied top label scores; each tied label gets "
            "1/k credit"
        )
    return TaskSummary(
        run=run.label,
        model=run.model,
        task=task.task,
        kind=task.kind,
        split=task.split,
        n_examples=table.n_examples,
        n_variants=int(table.var_example.shape[0]),
        metrics=metrics,
        maj_share_clean=100.0 * majority_share(clean_shares),
        maj_share_pert=100.0 * majority_share(pred_shares(table.var_ll)),
        verification=_verifications(cert),
        notes=tuple(notes),
        tie_share=100.0 * n_tied / n_docs if n_docs else math.nan,
        checks=tuple(
            certificate_checks(
                table,
                phi=settings.cert.phi,
                psi=settings.cert.psi,
                seed=settings.cert.seed,
                extra=settings.cert,
            )
        ),
        fit=dict(run.fits.get(correction_key(task.task), {})),
        cert_splits=_cert_splits(table, settings),
    )


def _cert_splits(table: MarginTable, settings: ReportSettings) -> dict[str, RuleSummary]:
    """The finite-sample certificate and the plug-in rules over ``settings.n_splits`` splits."""
    if settings.n_splits <= 0 or table.n_examples == 0:
        return {}
    flags = split_flags(table, settings.n_splits, settings.cert.phi, settings.alpha)
    n_boot = min(settings.n_resamples, 2000)
    return {
        rule: summarize([f], settings.cert.phi, n_boot, settings.confidence, settings.seed)
        for rule, f in flags.items()
    }


def summarize_pair(
    base: Run, other: Run, paired: PairedTask, settings: ReportSettings
) -> PairSummary:
    """The PAIR_METRICS of one task, resampling the same examples for both runs."""
    a = _run_data(paired.base, settings.cert)
    b = _run_data(paired.other, settings.cert)
    if not np.array_equal(a.table.example_ids, b.table.example_ids):
        raise AssertionError("paired tables must list the same examples")
    fa = _run_derive(a.q, a.cert.computable("c"), a.cert.computable("h"), settings.cert)
    fb = _run_derive(b.q, b.cert.computable("c"), b.cert.computable("h"), settings.cert)
    width = a.suff.shape[1]

    def derive(t: np.ndarray) -> np.ndarray:
        return _pair_from_runs(fa(t[:, :width]), fb(t[:, width:]))

    suff = np.hstack([a.suff, b.suff])
    notes: list[str] = []
    if a.table.n_examples >= 2:
        ci = cluster_bootstrap_ci(
            linear_stat(suff, derive),
            a.table.n_examples,
            n_resamples=settings.n_resamples,
            confidence=settings.confidence,
            seed=_task_seed(settings, paired.task),
        )
        metrics = _estimates(PAIR_METRICS, ci)
        notes += _ci_notes(PAIR_METRICS, ci, settings.n_resamples)
    else:
        point = derive(suff.sum(axis=0, keepdims=True))[0]
        metrics = {n: Estimate(float(point[k])) for k, n in enumerate(PAIR_METRICS)}
    for name, why in (
        ("p_damage", "BAC_clean = 0"),
        ("p_recover", "no perturbation damage (BAC_clean = BAC_pert)"),
        ("p_clean", "BAC_clean = 0"),
        ("p_combined", "pooled BAC = 0"),
    ):
        if math.isnan(metrics[name].value):
            notes.append(f"{name} undefined: {why}")
    dmg = metrics["p_damage"].value
    if math.isfinite(dmg) and abs(dmg) < 2.0:
        notes.append("p_recover is a ratio over a damage below 2% of clean BAC: unstable")
    return PairSummary(
        base=base.label,
        other=other.label,
        task=paired.task,
        kind=paired.base.kind,
        split=paired.base.split,
        metrics=metrics,
        notes=tuple(notes),
    )


def _groups(
    rows: Sequence[Any], label_of: Callable[[Any], str], names: Sequence[str], seed: int, n: int
) -> list[GroupSummary]:
    keys: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        keys.setdefault((label_of(r), r.kind), []).append(r)
    out = []
    for (label, kind), group in keys.items():
        metrics = {
            m: task_level_ci([r.metrics[m].value for r in group], n_resamples=n, seed=seed)
            for m in names
        }
        out.append(GroupSummary(label, kind, metrics))
    return out


def prompt_style(results: Mapping[str, Any]) -> str:
    """``chat`` when the harness applied a chat template (or a system instruction), else
    ``plain``."""
    if results.get("chat_template") or results.get("system_instruction"):
        return "chat"
    return "plain"


def build_report(runs: Sequence[Run], settings: ReportSettings = ReportSettings()) -> Report:
    """One run: robustness per task. Two or more: also every run against the first, paired."""
    if not runs:
        raise ValueError("no runs")
    notes: list[str] = [f"{r.label}: {n}" for r in runs for n in r.notes]
    tasks = [summarize_task(run, run.tasks[t], settings) for run in runs for t in sorted(run.tasks)]
    pairs: list[PairSummary] = []
    for other in runs[1:]:
        paired, more = pair_runs(runs[0], other)
        notes += more
        pairs += [summarize_pair(runs[0], other, p, settings) for p in paired]
    n, seed = settings.n_resamples, settings.seed
    return Report(
        settings=settings,
        runs=[
            {
                "label": r.label,
                "model": r.model,
                "results": str(r.results_file),
                "prompt_style": prompt_style(r.results),
                "replay": bool(r.results.get("lm_eval_robust_replay")),
            }
            for r in runs
        ],
        tasks=tasks,
        pairs=pairs,
        across_runs=_groups(tasks, lambda r: r.run, RUN_METRICS, seed, n),
        across_pairs=_groups(pairs, lambda r: f"{r.other} vs {r.base}", PAIR_METRICS, seed, n),
        notes=notes,
    )
