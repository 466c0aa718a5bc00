"""Leaderboard robustness measures of one perturbed task, and their clustered bootstrap.

The measures other tools report, computed from the per-doc items of one task (clean prompt =
``pert_id`` 0, perturbed prompts = the rest; ties give 1/k credit, :mod:`.ties`):

* ``bac_worst``: worst-case BAC. Per example, the lowest credit over its clean prompt and all of
  its perturbations (HELM's "robustness" accuracy: an example counts only if every variant of it is
  right), then balanced over the gold classes.
* ``consistency``: the share of perturbed prompts whose prediction equals the example's clean
  prediction (with ties, the expected agreement of two random tie-breaks).
* ``fmt_best`` / ``fmt_worst`` / ``fmt_median`` / ``fmt_spread``: BAC per *variant* (the prompt
  format of a format-perturbed doc; the text-perturbation kind of a text-perturbed doc), then the
  best, worst and median variant and best minus worst (FormatSpread's spread). A variant counts
  only if its docs cover every gold class of the task. Under ``design=crossed`` every variant holds
  every test example, so the variants are compared on the same examples; under the default
  ``nested`` design each example has its own variants and the per-variant BACs are over different
  examples.

Every statistic here, and the classification ones it shares data with (BAC, accuracy, δ_drop,
majority share, tie share, certified shares), is a function of weighted per-example sums, so a
clustered bootstrap (an example and all its variants move together) is one matrix product per
chunk of resamples (:mod:`.bootstrap`). :func:`replicates` gives the estimates, the resampled and
the leave-one-example-out values that BCa intervals (per task, and for a mean over tasks) and the
standard errors written into lm-eval's results (``<metric>_stderr``) are made of.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lm_eval_robust.base.harness_names import ROBUSTNESS_METRICS
from lm_eval_robust.stats.bootstrap import bac_from_counts, jackknife_weights, resample_weights
from lm_eval_robust.values.complete import complete_items
from lm_eval_robust.values.ties import credit_from_shares, pred_shares

__all__ = [
    "BOOTSTRAP_STATS",
    "Replicates",
    "RobustTable",
    "bac_worst",
    "consistency",
    "fmt_best",
    "fmt_median",
    "fmt_spread",
    "fmt_worst",
    "replicates",
    "table_of",
    "variant_bac",
]

#: statistics :func:`statistics` computes, in its column order
BOOTSTRAP_STATS: tuple[str, ...] = (
    "bac_clean",
    "bac_pert",
    "delta_drop",
    "acc_clean",
    "acc_pert",
    "maj_share_clean",
    "maj_share_pert",
    "tie_share",
    *ROBUSTNESS_METRICS,  # bac_worst, consistency, fmt_best, fmt_worst, fmt_median, fmt_spread
    "p_cert_h",
    "p_cert_c",
)

CLEAN_VARIANT = "clean"


def variant_of(item: Mapping[str, Any]) -> str:
    """The variant a doc belongs to: its ``variant`` field (format id or text kind)."""
    v = item.get("variant")
    return CLEAN_VARIANT if int(item["pert_id"]) == 0 else str(v if v is not None else "?")


@dataclass(frozen=True)
class RobustTable:
    """Per-example sums of one task (``E`` examples, ``Q`` labels, ``V`` perturbed variants)."""

    example_ids: tuple[str, ...]
    gold: np.ndarray  # [E]
    onehot: np.ndarray  # [E, Q]
    has_clean: np.ndarray  # [E] bool
    clean_credit: np.ndarray  # [E]
    clean_shares: np.ndarray  # [E, Q]
    pert_credit: np.ndarray  # [E] sum over perturbed docs
    pert_count: np.ndarray  # [E]
    pert_shares: np.ndarray  # [E, Q] sum over perturbed docs
    worst_credit: np.ndarray  # [E]
    agree: np.ndarray  # [E] sum over perturbed docs of agreement with the clean prediction
    ties: np.ndarray  # [E] tied docs, clean and perturbed
    docs: np.ndarray  # [E]
    variants: tuple[str, ...]
    var_credit: np.ndarray  # [E, V]
    var_count: np.ndarray  # [E, V]
    certified_h: np.ndarray  # [E] (NaN: not eligible or not computable)
    certified_c: np.ndarray  # [E]

    @property
    def n_examples(self) -> int:
        return len(self.example_ids)

    @classmethod
    def from_items(
        cls, items: Iterable[Mapping[str, Any]], certificates: bool = True
    ) -> RobustTable:
        """The table of a task's items; ``certificates=False`` leaves ``certified_h``/``_c`` NaN
        (no certificate computed, and no note logged about them), for callers that need none."""
        rows = complete_items(list(items))
        by_ex: dict[str, list[Mapping[str, Any]]] = {}
        for r in rows:
            by_ex.setdefault(str(r["example_id"]), []).append(r)
        ids = tuple(sorted(by_ex))
        lls = [np.asarray(r["ll"], dtype=np.float64) for r in rows]
        q = max([len(v) for v in lls] + [int(r["gold"]) + 1 for r in rows] + [1])
        variants = tuple(sorted({variant_of(r) for r in rows} - {CLEAN_VARIANT}))
        vix = {v: i for i, v in enumerate(variants)}
        e = len(ids)
        t = {
            name: np.zeros(e)
            for name in ("clean_credit", "pert_credit", "pert_count", "agree", "ties", "docs")
        }
        gold = np.zeros(e, dtype=np.int64)
        has_clean = np.zeros(e, dtype=bool)
        clean_shares = np.zeros((e, q))
        pert_shares = np.zeros((e, q))
        worst = np.full(e, np.nan)
        var_credit = np.zeros((e, len(variants)))
        var_count = np.zeros((e, len(variants)))
        for i, ex in enumerate(ids):
            docs = sorted(by_ex[ex], key=lambda r: int(r["pert_id"]))
            gold[i] = int(docs[0]["gold"])
            ll = np.full((len(docs), q), -np.inf)
            for j, r in enumerate(docs):
                vals = np.asarray(r["ll"], dtype=np.float64)
                ll[j, : vals.size] = vals
            shares = pred_shares(ll)
            credit = credit_from_shares(shares, np.full(len(docs), gold[i]))
            tied = (shares > 0).sum(axis=1) > 1
            clean = np.array([int(r["pert_id"]) == 0 for r in docs])
            t["ties"][i] = tied.sum()
            t["docs"][i] = len(docs)
            if clean.any():
                has_clean[i] = True
                c = int(np.flatnonzero(clean)[0])
                t["clean_credit"][i] = credit[c]
                clean_shares[i] = shares[c]
                t["agree"][i] = float((shares[~clean] @ shares[c]).sum())
            pert = ~clean
            t["pert_credit"][i] = credit[pert].sum()
            t["pert_count"][i] = pert.sum()
            pert_shares[i] = shares[pert].sum(axis=0)
            worst[i] = credit.min() if clean.any() and pert.any() else np.nan
            for d in np.flatnonzero(pert):
                col = vix[variant_of(docs[d])]
                var_credit[i, col] += credit[d]
                var_count[i, col] += 1
        cert_h, cert_c = (
            _certified(rows, ids) if certificates else (np.full(e, np.nan), np.full(e, np.nan))
        )
        onehot = np.zeros((e, q))
        onehot[np.arange(e), gold] = 1.0
        return cls(
            example_ids=ids,
            gold=gold,
            onehot=onehot,
            has_clean=has_clean,
            clean_credit=t["clean_credit"],
            clean_shares=clean_shares,
            pert_credit=t["pert_credit"],
            pert_count=t["pert_count"],
            pert_shares=pert_shares,
            worst_credit=worst,
            agree=t["agree"],
            ties=t["ties"],
            docs=t["docs"],
            variants=variants,
            var_credit=var_credit,
            var_count=var_count,
            certified_h=cert_h,
            certified_c=cert_c,
        )


def _certified(rows: Sequence[Mapping[str, Any]], ids: Sequence[str]) -> tuple[np.ndarray, ...]:
    """Per-example certificate indicators (NaN where the rule cannot apply to the task)."""
    out = [np.full(len(ids), np.nan), np.full(len(ids), np.nan)]
    if not any(int(r["pert_id"]) > 0 for r in rows):
        return tuple(out)
    if len({len(r["ll"]) for r in rows}) > 1:  # choices differ per doc: no label-space certificate
        return tuple(out)
    from lm_eval_robust.stats.certify import certify_items

    cert = certify_items(rows)
    if cert is None:
        return tuple(out)
    pos = {str(x): i for i, x in enumerate(cert.table.example_ids)}
    for k, (rule, flags) in enumerate((("h", cert.certified_h), ("c", cert.certified_c))):
        if not cert.computable(rule):  # type: ignore[arg-type]
            continue
        for i, ex in enumerate(ids):
            j = pos.get(ex)
            if j is not None and bool(cert.eligible[j]):
                out[k][i] = float(flags[j])
    return tuple(out)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _variant_bacs(t: RobustTable, w: np.ndarray) -> np.ndarray:
    """``[b, V]`` BAC of every variant under cluster weights ``w [b, E]`` (NaN: a class missing)."""
    if not t.variants:
        return np.full((w.shape[0], 0), np.nan)
    e, v, q = t.n_examples, len(t.variants), t.onehot.shape[1]
    num = (w @ (t.var_credit[:, :, None] * t.onehot[:, None, :]).reshape(e, v * q)).reshape(
        -1, v, q
    )
    den = (w @ (t.var_count[:, :, None] * t.onehot[:, None, :]).reshape(e, v * q)).reshape(-1, v, q)
    present = (w @ t.onehot) > 0  # [b, Q] classes in the resample
    complete = np.all((den > 0) | ~present[:, None, :], axis=-1)  # [b, V]
    return np.where(complete, bac_from_counts(num, den), np.nan)


def _spread(bacs: np.ndarray) -> np.ndarray:
    """``[b, 4]`` best, worst, median and spread over the variants (NaN: fewer than two)."""
    out = np.full((bacs.shape[0], 4), np.nan)
    ok = np.isfinite(bacs).sum(axis=1) >= 2
    if ok.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            b = bacs[ok]
            out[ok, 0] = np.nanmax(b, axis=1)
            out[ok, 1] = np.nanmin(b, axis=1)
            out[ok, 2] = np.nanmedian(b, axis=1)
            out[ok, 3] = out[ok, 0] - out[ok, 1]
    return out


def statistics(t: RobustTable, w: np.ndarray) -> np.ndarray:
    """``[b, S]`` every statistic of :data:`BOOTSTRAP_STATS` under cluster weights ``w [b, E]``."""
    w = np.asarray(w, dtype=np.float64)
    c = w * t.has_clean  # clean prompts exist only for these examples
    oh = t.onehot
    bac_clean = bac_from_counts(c @ (oh * t.clean_credit[:, None]), c @ oh)
    bac_pert = bac_from_counts(w @ (oh * t.pert_credit[:, None]), w @ (oh * t.pert_count[:, None]))
    n_clean = c.sum(axis=1)
    n_pert = w @ t.pert_count
    maj_clean = np.max(c @ t.clean_shares, axis=1) / np.where(n_clean > 0, n_clean, np.nan)
    maj_pert = np.max(w @ t.pert_shares, axis=1) / np.where(n_pert > 0, n_pert, np.nan)
    worst_ok = np.isfinite(t.worst_credit)
    wk = w * worst_ok
    worst = np.where(worst_ok, t.worst_credit, 0.0)
    bac_worst_v = bac_from_counts(wk @ (oh * worst[:, None]), wk @ oh)
    cols = [
        bac_clean,
        bac_pert,
        bac_pert - bac_clean,
        _ratio(c @ t.clean_credit, n_clean),
        _ratio(w @ t.pert_credit, n_pert),
        maj_clean,
        maj_pert,
        _ratio(w @ t.ties, w @ t.docs),
        np.where(wk.sum(axis=1) > 0, bac_worst_v, np.nan),
        _ratio(c @ t.agree, c @ t.pert_count),
    ]
    spread = _spread(_variant_bacs(t, w))
    certs = []
    for flags in (t.certified_h, t.certified_c):
        ok = np.isfinite(flags)
        certs.append(
            _ratio(w @ np.where(ok, flags, 0.0), w @ ok.astype(float))
            if ok.any()
            else np.full(w.shape[0], np.nan)
        )
    return np.column_stack([*cols, spread, *certs])


@dataclass(frozen=True)
class Replicates:
    """Estimates ``[S]``, bootstrap values ``[B, S]`` and jackknife values ``[E, S]`` of a task."""

    names: tuple[str, ...]
    estimate: np.ndarray
    boot: np.ndarray
    jack: np.ndarray

    def stderr(self) -> np.ndarray:
        """``[S]`` bootstrap standard errors (NaN where fewer than 2 resamples are defined)."""
        out = np.full(len(self.names), np.nan)
        for s in range(len(self.names)):
            col = self.boot[:, s]
            col = col[np.isfinite(col)]
            if col.size >= 2 and np.isfinite(self.estimate[s]):
                out[s] = float(np.std(col, ddof=1))
        return out


def replicates(t: RobustTable, n_resamples: int, seed: int = 0) -> Replicates:
    """Clustered bootstrap (examples resampled with all their variants) and jackknife values."""
    e = t.n_examples
    est = statistics(t, np.ones((1, e)))[0]
    if e < 2:
        nan = np.full((0, len(BOOTSTRAP_STATS)), np.nan)
        return Replicates(BOOTSTRAP_STATS, est, nan, nan)
    rng = np.random.default_rng(seed)
    boot = np.concatenate(
        [statistics(t, w) for w in resample_weights(e, n_resamples, rng, max_elements=1 << 18)]
    )
    jack = np.concatenate([statistics(t, w) for w in jackknife_weights(e, max_elements=1 << 18)])
    return Replicates(BOOTSTRAP_STATS, est, boot, jack)


def variant_bac(items: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """BAC of each perturbed variant that covers every gold class (the rest are left out)."""
    t = table_of(items)
    bacs = _variant_bacs(t, np.ones((1, t.n_examples)))[0]
    return {v: float(b) for v, b in zip(t.variants, bacs, strict=True) if math.isfinite(b)}


#: recent tables by the identity of their items, each entry holding its items so that no id can be
#: reused while it is cached: lm-eval calls every aggregation of a task with the same per-doc
#: dicts (our process_results returns one dict under every metric key)
_tables: OrderedDict[tuple[int, ...], tuple[list[Mapping[str, Any]], RobustTable]] = OrderedDict()


def table_of(items: Iterable[Mapping[str, Any]]) -> RobustTable:
    """:meth:`RobustTable.from_items`, built once for all the metrics of a task."""
    kept = list(items)
    key = tuple(id(x) for x in kept)
    hit = _tables.get(key)
    if hit is None:
        hit = (kept, RobustTable.from_items(kept))
        _tables[key] = hit
        while len(_tables) > 2:
            _tables.popitem(last=False)
    return hit[1]


def _stat(items: Iterable[Mapping[str, Any]], name: str) -> float:
    t = table_of(items)
    return float(statistics(t, np.ones((1, t.n_examples)))[0][BOOTSTRAP_STATS.index(name)])


def bac_worst(items: Iterable[Mapping[str, Any]]) -> float:
    """Worst-case BAC: per example the lowest credit over its clean and perturbed prompts."""
    return _stat(items, "bac_worst")


def consistency(items: Iterable[Mapping[str, Any]]) -> float:
    """Share of perturbed prompts predicted as the example's clean prompt is."""
    return _stat(items, "consistency")


def fmt_best(items: Iterable[Mapping[str, Any]]) -> float:
    """BAC of the best perturbed variant (format, or text-perturbation kind)."""
    return _stat(items, "fmt_best")


def fmt_worst(items: Iterable[Mapping[str, Any]]) -> float:
    """BAC of the worst perturbed variant."""
    return _stat(items, "fmt_worst")


def fmt_median(items: Iterable[Mapping[str, Any]]) -> float:
    """Median BAC over the perturbed variants."""
    return _stat(items, "fmt_median")


def fmt_spread(items: Iterable[Mapping[str, Any]]) -> float:
    """Best minus worst variant BAC (the spread across formats)."""
    return _stat(items, "fmt_spread")
