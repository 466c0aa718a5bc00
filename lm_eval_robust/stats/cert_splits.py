"""Certificate rates over repeated estimation/held-back splits, and the check that can fail.

Every rule decides an example's certificate from one half of its variants (the estimation half)
and is checked on the other half (held back). One split is one draw of luck: the rate is
averaged over ``n_splits`` splits (split ``s`` is :func:`~.certify.estimation_mask` with seed
``s``, a keyed pseudo-random half of each example's variants), and its interval comes from a
bootstrap that redraws both the examples (clustered, all variants with their example; tasks
independently) and the split, so the split-to-split variability is inside the interval.

Rules (:data:`RULES`):

* ``exact``: the finite-sample certificate of :mod:`.exact_cert` (exact binomial bound,
  Benjamini–Hochberg across the task's examples). The default wherever a rate is published.
  n/a, with the K it needs, where the estimation halves are too small to certify anything.
* ``plugin_c`` / ``plugin_h``: the paper's estimator (Remark E.3: a uniform reference on the
  sample range of the estimation shifts, ``eps_B = 0``), Chebyshev/Cantelli and
  Hoeffding/Bernstein; a plug-in estimate without a finite-sample guarantee, labelled with the
  K it was computed at.

The check (:class:`RuleSummary`): the held-back accuracy (ties 1/k) of certified and of
uncertified examples, pooled over the splits; their difference with its interval (does
certification select anything?); the share of certified (split, example) pairs whose held-back
accuracy is below ``1 - phi``, beside the share that certificates all exactly at ``1 - phi``
would show on as many held-back variants (``share_below_bound``: an example at accuracy
``1 - phi`` falls below it on ``n`` variants with probability ``P(Bin(n, 1 - phi) < (1 - phi)
n)``; valid certificates show at most that); ``flagged`` when the interval of the certified
examples' held-back accuracy lies wholly below ``1 - phi`` (the rule promises more than the data
show), ``doubtful`` when the point estimate does or the share below exceeds its bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from lm_eval_robust.stats.certificates import CertConfig, certify
from lm_eval_robust.stats.exact_cert import ExactConfig, certify_counts
from lm_eval_robust.stats.margins import MarginTable, estimation_mask

__all__ = [
    "RULES",
    "RuleSummary",
    "SplitFlags",
    "exact_rate",
    "split_flags",
    "summarize",
]

#: rule -> its label in tables
RULES: dict[str, str] = {
    "exact": "exact (binomial, BH)",
    "plugin_c": "plug-in p_C",
    "plugin_h": "plug-in p_H",
}


@dataclass(frozen=True, eq=False)
class SplitFlags:
    """One task, one rule, ``S`` splits of ``E`` eligible examples: ``certified [S, E]``,
    held-back credit sums and counts ``held_sum``/``held_n [S, E]``; ``available``: the rule
    can certify at this size (else ``reason`` says what size it needs); ``k``: the median
    number of perturbations per example."""

    rule: str
    certified: np.ndarray
    held_sum: np.ndarray
    held_n: np.ndarray
    available: bool
    k: int
    reason: str = ""

    @property
    def n_examples(self) -> int:
        return int(self.certified.shape[1])


def split_flags(
    table: MarginTable,
    n_splits: int = 50,
    phi: float = 0.1,
    alpha: float = 0.05,
    psi: float = 0.05,
) -> dict[str, SplitFlags]:
    """Every rule of :data:`RULES` on one task over splits ``0 .. n_splits - 1``."""
    if n_splits < 1:
        raise ValueError(f"n_splits must be >= 1; got {n_splits}")
    counts = table.variant_counts()
    eligible = table.has_clean & (counts >= 2)
    idx = np.flatnonzero(eligible)
    e = table.n_examples
    k = int(np.median(counts[idx])) if idx.size else 0
    credit = table.var_correct()
    right = credit >= 1.0  # a tied variant counts as wrong for the exact rule
    exact_cfg = ExactConfig(phi=phi, alpha=alpha)
    n_need = exact_cfg.min_variants
    out: dict[str, list[np.ndarray]] = {r: [] for r in RULES}
    held_sum, held_n = [], []
    for s in range(n_splits):
        est = estimation_mask(table, seed=s)
        ex = table.var_example
        hs = np.bincount(ex[~est], weights=credit[~est], minlength=e)[idx]
        hn = np.bincount(ex[~est], minlength=e)[idx].astype(np.float64)
        held_sum.append(hs)
        held_n.append(hn)
        succ = np.bincount(ex[est], weights=right[est].astype(np.float64), minlength=e)
        n_est = np.bincount(ex[est], minlength=e)
        out["exact"].append(
            certify_counts(succ[idx].astype(np.int64), n_est[idx], exact_cfg)
            if idx.size
            else np.zeros(0, bool)
        )
        cert = certify(table, CertConfig.named("paper", phi=phi, psi=psi, seed=s))
        out["plugin_c"].append(cert.certified_c[idx])
        out["plugin_h"].append(cert.certified_h[idx])
    n_est_med = (k + 1) // 2
    result = {}
    for rule, flags in out.items():
        if rule == "exact":
            ok = idx.size > 0 and n_est_med >= n_need
            reason = (
                ""
                if ok
                else f"n/a: needs K >= {exact_cfg.min_k} perturbations per example "
                f"({n_need} estimation variants) at phi = {phi}, alpha = {alpha}; this run has "
                f"K = {k}"
            )
        else:
            ok = idx.size > 0 and n_est_med >= 2
            reason = "" if ok else f"n/a: needs K >= 3 (a box from 2 shifts); K = {k}"
        result[rule] = SplitFlags(
            rule=rule,
            certified=np.array(flags, dtype=bool).reshape(n_splits, idx.size),
            held_sum=np.array(held_sum).reshape(n_splits, idx.size),
            held_n=np.array(held_n).reshape(n_splits, idx.size),
            available=bool(ok),
            k=k,
            reason=reason,
        )
    return result


def exact_rate(
    table: MarginTable, n_splits: int = 50, phi: float = 0.1, alpha: float = 0.05
) -> tuple[float, str]:
    """The finite-sample certified share (mean over splits) and, when it is NaN, why: fewer
    perturbations per example than the rule needs, or no example with a clean prompt."""
    counts = table.variant_counts()
    idx = np.flatnonzero(table.has_clean & (counts >= 2))
    cfg = ExactConfig(phi=phi, alpha=alpha)
    if idx.size == 0:
        return math.nan, "no example has its clean prompt and 2 perturbations"
    k = int(np.median(counts[idx]))
    if (k + 1) // 2 < cfg.min_variants:
        return math.nan, (
            f"K = {k} perturbations per example; the finite-sample certificate needs "
            f"K >= {cfg.min_k} at phi = {phi}, alpha = {alpha}"
        )
    right = table.var_correct() >= 1.0
    e = table.n_examples
    rates = []
    for s in range(n_splits):
        est = estimation_mask(table, seed=s)
        ex = table.var_example[est]
        succ = np.bincount(ex, weights=right[est].astype(np.float64), minlength=e)[idx]
        n = np.bincount(ex, minlength=e)[idx]
        rates.append(float(certify_counts(succ.astype(np.int64), n, cfg).mean()))
    return float(np.mean(rates)), ""


@dataclass(frozen=True)
class RuleSummary:
    """The rate of one rule (one task, or the mean over tasks) and its held-back check.

    Fractions. ``rate``: mean over splits (NaN when not available, ``reason`` says why);
    ``rate_low``/``rate_high``: the interval over examples and splits; ``split_min``/``split_max``:
    the range of the single-split rates; ``acc_certified``/``acc_uncertified``: held-back
    accuracy pooled over splits; ``diff`` certified minus uncertified with its interval;
    ``share_below``: certified (split, example) pairs below ``1 - phi`` on their held-back
    variants; ``selects``: ``diff_low > 0``; ``flagged``: ``acc_certified_high < 1 - phi``.
    """

    rule: str
    label: str
    k: int
    n_splits: int
    n_examples: int
    available: bool
    reason: str
    rate: float
    rate_low: float
    rate_high: float
    split_min: float
    split_max: float
    acc_certified: float
    acc_certified_low: float
    acc_certified_high: float
    acc_uncertified: float
    diff: float
    diff_low: float
    diff_high: float
    share_below: float
    share_below_bound: float
    n_certified: int
    selects: bool
    flagged: bool
    doubtful: bool

    @property
    def verdict(self) -> str:
        if not self.available:
            return "n/a"
        if self.n_certified == 0:
            return "nothing certified"
        if self.flagged:
            return "fails its promise"
        head = "selects" if self.selects else "no selection shown"
        return head + ("; promise in doubt" if self.doubtful else "")

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in self.__dict__.items():
            out[key] = None if isinstance(value, float) and not math.isfinite(value) else value
        return out


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def _pct(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if x.size >= 10 else math.nan


def summarize(
    tasks: Sequence[SplitFlags],
    phi: float = 0.1,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> RuleSummary:
    """One rule over one or more tasks (the mean of the tasks' rates, tasks resampled
    independently)."""
    if not tasks:
        raise ValueError("no task to summarize")
    rule = tasks[0].rule
    k = int(np.median([t.k for t in tasks]))
    n_splits = int(tasks[0].certified.shape[0])
    label = RULES.get(rule, rule) + ("" if rule == "exact" else f", K = {k}")
    avail = [t for t in tasks if t.available and t.n_examples > 0]
    n_ex = sum(t.n_examples for t in tasks)
    if not avail:
        reason = tasks[0].reason or "n/a: no example with a clean prompt and 2 variants"
        nan = math.nan
        return RuleSummary(
            rule, label, k, n_splits, n_ex, False, reason, nan, nan, nan, nan, nan, nan, nan,
            nan, nan, nan, nan, nan, nan, nan, 0, False, False, False,
        )  # fmt: skip
    split_rates = np.mean([t.certified.mean(axis=1) for t in avail], axis=0)  # [S]
    flags = [t.certified for t in avail]
    cs = sum(float((t.held_sum * t.certified).sum()) for t in avail)
    cn = sum(float((t.held_n * t.certified).sum()) for t in avail)
    us = sum(float((t.held_sum * ~t.certified).sum()) for t in avail)
    un = sum(float((t.held_n * ~t.certified).sum()) for t in avail)
    acc_c, acc_u = _ratio(cs, cn), _ratio(us, un)
    below = 0
    bound = 0.0
    n_cert = 0
    for t in avail:
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = t.held_sum / np.where(t.held_n > 0, t.held_n, np.nan)
        below += int((t.certified & (acc < 1.0 - phi - 1e-12)).sum())
        n_held = t.held_n[t.certified].astype(np.int64)
        cut = np.ceil(np.round((1.0 - phi) * n_held, 9)) - 1
        bound += float(binom.cdf(cut, n_held, 1.0 - phi).sum())
        n_cert += int(t.certified.sum())
    rng = np.random.default_rng(seed)
    boot = np.full((n_resamples, 3), np.nan)
    for b in range(n_resamples):
        rate = 0.0
        sums = np.zeros(4)
        for t, f in zip(avail, flags, strict=True):
            s = int(rng.integers(n_splits))
            i = rng.integers(t.n_examples, size=t.n_examples)
            fi = f[s, i]
            rate += fi.mean()
            hs, hn = t.held_sum[s, i], t.held_n[s, i]
            sums += (hs[fi].sum(), hn[fi].sum(), hs[~fi].sum(), hn[~fi].sum())
        ac, au = _ratio(sums[0], sums[1]), _ratio(sums[2], sums[3])
        boot[b] = (rate / len(avail), ac, ac - au)
    lo_q, hi_q = 50 * (1 - confidence), 100 - 50 * (1 - confidence)
    diff_low = _pct(boot[:, 2], lo_q)
    acc_c_high = _pct(boot[:, 1], hi_q)
    return RuleSummary(
        rule=rule,
        label=label,
        k=k,
        n_splits=n_splits,
        n_examples=n_ex,
        available=True,
        reason="",
        rate=float(split_rates.mean()),
        rate_low=_pct(boot[:, 0], lo_q),
        rate_high=_pct(boot[:, 0], hi_q),
        split_min=float(split_rates.min()),
        split_max=float(split_rates.max()),
        acc_certified=acc_c,
        acc_certified_low=_pct(boot[:, 1], lo_q),
        acc_certified_high=acc_c_high,
        acc_uncertified=acc_u,
        diff=acc_c - acc_u,
        diff_low=diff_low,
        diff_high=_pct(boot[:, 2], hi_q),
        share_below=_ratio(below, n_cert),
        share_below_bound=_ratio(bound, n_cert),
        n_certified=n_cert,
        selects=bool(math.isfinite(diff_low) and diff_low > 0),
        flagged=bool(math.isfinite(acc_c_high) and acc_c_high < 1.0 - phi),
        doubtful=bool(
            (math.isfinite(acc_c) and acc_c < 1.0 - phi) or (below > bound and n_cert > 0)
        ),
    )
