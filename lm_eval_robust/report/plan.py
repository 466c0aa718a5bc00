"""Sample-size planning from a pilot run: how many source examples (and perturbations each) a
task needs before an effect of a given size is significant.

The report's CIs resample source examples as clusters, so the width of an interval is set by two
sources of variance: between examples (which examples were drawn) and within an example (which of
its perturbations were drawn). A pilot run estimates both. For each candidate number of
perturbations ``K`` this module runs a **two-stage bootstrap** of the pilot:

1. draw the examples with replacement (cluster weights, as the report does);
2. for every drawn example, draw ``K`` of its perturbed variants with replacement: the count of
   correct variants is binomial with the example's observed success rate, or, for a paired
   comparison (base vs debiased on the same variants), multinomial over the four joint outcomes
   (both right, base only, other only, neither), which keeps the pairing.

The standard deviation of the statistic over these resamples is its standard error ``SE(E0, K)``
at the pilot's ``E0`` examples. Clusters are independent, so ``SE(E, K) = SE(E0, K)·√(E0/E)``,
and an effect ``Δ`` is detected by a two-sided test at level ``α`` with power ``1-β`` once
``(z_{1-α/2} + z_{1-β})·SE(E, K) ≤ Δ``:

    E(K) = ⌈E0 · ((z_{1-α/2} + z_{1-β}) · SE(E0, K) / Δ)²⌉.

The plug-in rates make within-example variance zero for an example whose pilot variants all
agree, and larger ``K`` cannot reduce the between-example part: that is why ``E(K)`` levels off
as ``K`` grows, and the table shows where adding perturbations stops paying.

With a budget (``--budget``: prompts a task may cost, its clean prompts included), the question
turns round: at ``E(K) = ⌊budget/(1+K)⌋`` examples, the smallest effect detected with that power is

    Δ(K) = z · SE(E0, K) · √(E0/E(K)),

and the ``K`` with the smallest ``Δ(K)`` is the size to run: few perturbations of many examples
when examples disagree with each other more than perturbations do, the reverse otherwise.

Statistics: ``delta_drop`` (perturbed minus clean BAC of one run) and, for a pair of runs,
``delta_pert`` (perturbed BAC of the other run minus the base run's), both in points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from lm_eval_robust.report.markdown import markdown_table
from lm_eval_robust.stats.bootstrap import bac_from_counts
from lm_eval_robust.stats.margins import MarginTable
from lm_eval_robust.stats.robustness import RobustTable

__all__ = [
    "PlanRow",
    "PlanSettings",
    "detectable_effect",
    "examples_needed",
    "plan_drop",
    "plan_mean",
    "plan_pair",
    "to_markdown",
]


@dataclass(frozen=True)
class PlanSettings:
    effect: float = 1.0  # points of BAC
    alpha: float = 0.05
    power: float = 0.8
    ks: tuple[int, ...] = (20, 50, 100, 200)
    n_resamples: int = 2000
    seed: int = 0
    budget: int | None = None  # prompts per task (clean ones included), or None

    def __post_init__(self) -> None:
        if not self.effect > 0:
            raise ValueError(f"effect must be positive (points of BAC); got {self.effect}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1); got {self.alpha}")
        if not 0 < self.power < 1:
            raise ValueError(f"power must be in (0, 1); got {self.power}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"perturbation counts must be positive integers; got {self.ks}")
        if self.n_resamples < 100:
            raise ValueError(f"resamples must be at least 100; got {self.n_resamples}")
        if self.budget is not None and self.budget < 2 * (1 + min(self.ks)):
            raise ValueError(
                f"a budget of {self.budget} prompts cannot hold 2 examples at K = {min(self.ks)}; "
                f"give at least {2 * (1 + min(self.ks))}"
            )

    @property
    def z(self) -> float:
        return float(ndtri(1.0 - self.alpha / 2.0) + ndtri(self.power))


@dataclass(frozen=True)
class PlanRow:
    task: str
    statistic: str
    estimate: float  # points, on the pilot
    n_examples: int  # pilot examples E0
    k_pilot: float  # mean perturbed variants per pilot example
    se: dict[int, float]  # K -> SE at E0 examples (points)
    needed: dict[int, int]  # K -> examples for the effect
    detectable: dict[int, float] | None = None  # K -> effect detected at the budget (points)
    n_tasks: int = 1  # > 1: the mean over that many tasks (:func:`plan_mean`), sizes per task

    def best_at_budget(self, budget: int) -> tuple[int, int, float]:
        """``(K, examples, effect)`` of the size that detects the smallest effect at ``budget``
        prompts per task (the smaller K on a tie)."""
        det = self.detectable
        if det is None:
            raise ValueError("this plan was made without a budget")
        k = min(det, key=lambda k: (det[k], k))
        return k, budget // (1 + k), det[k]


def examples_needed(se0: float, e0: int, effect: float, z: float) -> int:
    """``⌈E0·(z·SE0/Δ)²⌉`` (at least 2); 0 when the pilot shows no variance at all."""
    if not math.isfinite(se0):
        raise ValueError("the pilot's standard error is not finite")
    if se0 <= 0.0:
        return 0
    return max(2, math.ceil(e0 * (z * se0 / effect) ** 2))


def detectable_effect(se0: float, e0: int, examples: int, z: float) -> float:
    """``z·SE0·√(E0/E)``: the effect (points) a test of that power detects at ``examples``."""
    if not math.isfinite(se0):
        raise ValueError("the pilot's standard error is not finite")
    return z * se0 * math.sqrt(e0 / examples)


def _check(has_clean: np.ndarray, pert_counts: np.ndarray, task: str) -> None:
    """A pilot plan can read: two examples or more, each with its clean doc and a perturbed one."""
    if len(pert_counts) < 2:
        raise ValueError(f"{task}: the pilot needs at least 2 examples to estimate variance")
    if not has_clean.all():
        raise ValueError(f"{task}: some examples have no clean doc; plan needs clean prompts")
    if np.any(pert_counts == 0):
        raise ValueError(f"{task}: some examples have no perturbed variants")


def _bac_change(onehot: np.ndarray, before: np.ndarray, after: np.ndarray) -> float:
    """BAC (points) of per-example success rates ``after`` minus that of ``before``."""
    n_cls = onehot.sum(0)
    return 100.0 * float(
        bac_from_counts(onehot.T @ after, n_cls) - bac_from_counts(onehot.T @ before, n_cls)
    )


def _cluster_weights(rng: np.random.Generator, b: int, e: int) -> np.ndarray:
    return rng.multinomial(e, np.full(e, 1.0 / e), size=b).astype(float)


def _row(
    task: str,
    statistic: str,
    estimate: float,
    counts: np.ndarray,
    se: dict[int, float],
    settings: PlanSettings,
) -> PlanRow:
    return _sized_row(
        task, statistic, estimate, int(counts.shape[0]), float(counts.mean()), se, settings
    )


def _sized_row(
    task: str,
    statistic: str,
    estimate: float,
    e: int,
    k_pilot: float,
    se: dict[int, float],
    settings: PlanSettings,
    n_tasks: int = 1,
) -> PlanRow:
    return PlanRow(
        task=task,
        statistic=statistic,
        estimate=estimate,
        n_examples=e,
        k_pilot=k_pilot,
        se=se,
        needed={k: examples_needed(s, e, settings.effect, settings.z) for k, s in se.items()},
        detectable=None
        if settings.budget is None
        else {
            k: detectable_effect(s, e, settings.budget // (1 + k), settings.z)
            for k, s in se.items()
        },
        n_tasks=n_tasks,
    )


def plan_mean(rows: Sequence[PlanRow], name: str, settings: PlanSettings) -> PlanRow:
    """The mean of the rows' statistic over their tasks, as a leaderboard's mean row averages
    them: examples *per task* needed, and detected at the budget per task. Tasks are drawn
    independently, so at ``E`` examples per task ``SE_mean(E, K) = √(Σ_t SE_t(E0_t, K)²·E0_t / E)
    / T``; the row states it at the tasks' mean pilot size ``E0``. A task whose pilot shows no
    variance adds none (the mean row's sizes are then a lower bound, and the table says so)."""
    if len(rows) < 2 or len({r.statistic for r in rows}) != 1:
        raise ValueError("a mean row needs at least two tasks of one statistic")
    t = len(rows)
    e0 = max(2, round(sum(r.n_examples for r in rows) / t))
    se = {
        k: math.sqrt(sum(r.se[k] ** 2 * r.n_examples for r in rows) / e0) / t for k in settings.ks
    }
    return _sized_row(
        name,
        rows[0].statistic,
        sum(r.estimate for r in rows) / t,
        e0,
        sum(r.k_pilot for r in rows) / t,
        se,
        settings,
        n_tasks=t,
    )


def _drop_inputs(table: MarginTable | RobustTable, task: str) -> tuple[np.ndarray, ...]:
    """(gold one-hot ``[E, Q]``, clean credit ``[E]``, perturbed success rate ``[E]``, perturbed
    counts ``[E]``), ties credited 1/k in both. A :class:`RobustTable` also holds tasks whose docs
    have different numbers of choices (BIG-bench's date_understanding: 5 or 6), as the
    leaderboard's BAC does; a :class:`MarginTable` needs one label set."""
    if isinstance(table, MarginTable):
        counts = table.variant_counts().astype(float)
        _check(table.has_clean, counts, task)
        var_ok = np.bincount(table.var_example, weights=table.var_correct(), minlength=len(counts))
        return table.gold_onehot(), table.clean_correct(), var_ok / counts, counts
    counts = table.pert_count.astype(float)
    _check(table.has_clean, counts, task)
    return table.onehot, table.clean_credit, table.pert_credit / counts, counts


def plan_drop(table: MarginTable | RobustTable, task: str, settings: PlanSettings) -> PlanRow:
    """Examples needed to detect a perturbation drop ``delta_drop`` of ``settings.effect``."""
    onehot, clean_ok, rate, counts = _drop_inputs(table, task)
    e = len(counts)
    estimate = _bac_change(onehot, clean_ok, rate)
    rng = np.random.default_rng(settings.seed)
    w = _cluster_weights(rng, settings.n_resamples, e)  # [B, E], the same for every K
    se: dict[int, float] = {}
    for k in settings.ks:
        hits = rng.binomial(k, np.broadcast_to(rate, w.shape)).astype(float)  # [B, E]
        pert = bac_from_counts((w * hits) @ onehot, (w * k) @ onehot)
        clean = bac_from_counts((w * clean_ok) @ onehot, w @ onehot)
        se[k] = 100.0 * float(np.std(pert - clean, ddof=1))
    return _row(task, "delta_drop", estimate, counts, se, settings)


def plan_pair(base: MarginTable, other: MarginTable, task: str, settings: PlanSettings) -> PlanRow:
    """Examples needed to detect a change of perturbed BAC (``delta_pert``) between two runs of
    the same docs, resampling each variant's joint outcome so the pairing is kept."""
    _check(base.has_clean, base.variant_counts(), task)
    if not (
        np.array_equal(base.example_ids, other.example_ids)
        and np.array_equal(base.var_example, other.var_example)
        and np.array_equal(base.var_pert_id, other.var_pert_id)
    ):
        raise ValueError(f"{task}: the two runs did not score the same variants; pair them first")
    onehot, ok_a, ok_b = base.gold_onehot(), base.var_correct(), other.var_correct()
    e = base.n_examples
    counts = base.variant_counts().astype(float)
    joint = np.stack(
        [ok_a * ok_b, ok_a * (1 - ok_b), (1 - ok_a) * ok_b, (1 - ok_a) * (1 - ok_b)], axis=1
    )
    probs = (
        np.stack(
            [np.bincount(base.var_example, weights=joint[:, j], minlength=e) for j in range(4)],
            axis=1,
        )
        / counts[:, None]
    )
    estimate = _bac_change(onehot, probs[:, 0] + probs[:, 1], probs[:, 0] + probs[:, 2])
    rng = np.random.default_rng(settings.seed)
    w = _cluster_weights(rng, settings.n_resamples, e)  # [B, E], the same for every K
    se: dict[int, float] = {}
    for k in settings.ks:
        draws = rng.multinomial(k, probs, size=(settings.n_resamples, e)).astype(float)  # [B, E, 4]
        hits_a = draws[..., 0] + draws[..., 1]
        hits_b = draws[..., 0] + draws[..., 2]
        total = (w * k) @ onehot
        diff = bac_from_counts((w * hits_b) @ onehot, total) - bac_from_counts(
            (w * hits_a) @ onehot, total
        )
        se[k] = 100.0 * float(np.std(diff, ddof=1))
    return _row(task, "delta_pert", estimate, counts, se, settings)


def to_markdown(rows: Sequence[PlanRow], settings: PlanSettings, label: str = "") -> str:
    ks = settings.ks
    head = (
        ["task", "statistic", "pilot value", "pilot E0 × K"]
        + [f"SE at E0, K={k}" for k in ks]
        + [f"examples needed, K={k}" for k in ks]
    )
    lines = [
        f"# Sample sizes{(' for ' + label) if label else ''}",
        "",
        f"Examples (source examples in the evaluated split) needed to detect an effect of "
        f"{settings.effect:g} point(s) of BAC with a two-sided test at α = {settings.alpha:g} "
        f"and power {settings.power:g} (z = {settings.z:.3f}), from a two-stage bootstrap of the "
        f"pilot ({settings.n_resamples} resamples): E(K) = ⌈E0·(z·SE(E0, K)/Δ)²⌉.",
        "",
    ]
    cells = [
        [
            r.task,
            r.statistic,
            f"{r.estimate:+.1f}",
            f"{r.n_examples} × {r.k_pilot:.0f}",
            *(f"{r.se[k]:.2f}" for k in ks),
            *(f"{r.needed[k]:,}" if r.se[k] > 0 else "–" for k in ks),
        ]
        for r in rows
    ]
    lines.append(markdown_table(head, cells))
    if settings.budget is not None:
        lines += ["", *_budget_section(rows, settings, settings.budget)]
    if any(r.n_tasks > 1 for r in rows):
        lines += [
            "",
            "A \"mean over N tasks\" row is the mean of its tasks' statistic, as a leaderboard's "
            "mean row averages them: its sizes are examples *per task*, the tasks drawn "
            "independently (SE_mean² = Σ SE_task²·E0_task / (E·T²)). A task whose pilot shows no "
            "variance adds none, so where a mean row holds such a task its sizes are a lower "
            "bound. As in the leaderboard, a format task none of whose prompts had parts to "
            "reformat (its perturbations are text ones) is left out of the format mean.",
        ]
    if any(r.se[k] <= 0 for r in rows for k in ks):
        lines += [
            "",
            "–: the pilot shows no variance at all (e.g. every prompt gets the same label), so it "
            "cannot tell how many examples are needed; run a pilot where the predictions vary.",
        ]
    return "\n".join(lines) + "\n"


def _budget_section(rows: Sequence[PlanRow], settings: PlanSettings, budget: int) -> list[str]:
    ks = settings.ks
    head = (
        ["task", "statistic"]
        + [f"detectable, K={k} ({budget // (1 + k)} ex.)" for k in ks]
        + ["size to run", "detects"]
    )
    cells = []
    for r in rows:
        k, e, eff = r.best_at_budget(budget)
        assert r.detectable is not None
        cells.append(
            [
                r.task,
                r.statistic,
                *(f"{r.detectable[kk]:.1f}" for kk in ks),
                f"{e} × {k}" if r.se[k] > 0 else "–",
                f"{eff:.1f}" if r.se[k] > 0 else "–",
            ]
        )
    worst = max(
        (r.best_at_budget(budget)[2] for r in rows if min(r.se.values()) > 0 and r.n_tasks == 1),
        default=0,
    )
    return [
        f"## At a budget of {budget:,} prompts per task",
        "",
        f"The smallest effect (points) detected with the same test and power when a task may cost "
        f"{budget:,} prompts, clean ones included: E(K) = ⌊{budget:,}/(1+K)⌋ examples at K "
        'perturbations, Δ(K) = z·SE(E0, K)·√(E0/E(K)). "size to run" is examples × K at the '
        f"smallest Δ; over these tasks that size detects {worst:.1f} points or more.",
        "",
        markdown_table(head, cells),
    ]
