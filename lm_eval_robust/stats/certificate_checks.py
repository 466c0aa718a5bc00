"""Each certificate estimator checked against the held-back (verification) half of the variants:
the paper's Table 12 (:func:`verification`) and the report's check of every estimator and rule
(:func:`certificate_checks`), which flags a rule whose certified examples do worse than promised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from lm_eval_robust.base.defaults import DEFAULT_CERT_PHI, DEFAULT_CERT_PSI
from lm_eval_robust.stats.certificates import ESTIMATORS, CertConfig, Certification, certify
from lm_eval_robust.stats.classification import balanced_accuracy_of_credit
from lm_eval_robust.stats.margins import MarginTable

__all__ = ["CertificateCheck", "Verification", "certificate_checks", "verification"]


@dataclass(frozen=True)
class Verification:
    """BAC and accuracy of the verification variants of certified vs uncertified examples."""

    bac_certified: float
    bac_uncertified: float
    acc_certified: float
    acc_uncertified: float
    n_certified: int
    n_uncertified: int
    n_variants_certified: int
    n_variants_uncertified: int


def verification(cert: Certification, rule: Literal["h", "c"]) -> Verification:
    """Table 12: performance on the held-back variants of certified / uncertified examples."""
    t = cert.table
    flag = cert.certified_h if rule == "h" else cert.certified_c
    ver = ~cert.est & cert.eligible[t.var_example]
    gold, credit = t.var_gold, t.var_correct()
    is_cert = flag[t.var_example]
    out: dict[str, float] = {}
    for name, sel in (("certified", ver & is_cert), ("uncertified", ver & ~is_cert)):
        out[f"bac_{name}"] = balanced_accuracy_of_credit(gold[sel], credit[sel])
        out[f"acc_{name}"] = float(credit[sel].mean()) if sel.any() else math.nan
        out[f"n_variants_{name}"] = int(sel.sum())
    return Verification(
        bac_certified=out["bac_certified"],
        bac_uncertified=out["bac_uncertified"],
        acc_certified=out["acc_certified"],
        acc_uncertified=out["acc_uncertified"],
        n_certified=int((flag & cert.eligible).sum()),
        n_uncertified=int((~flag & cert.eligible).sum()),
        n_variants_certified=int(out["n_variants_certified"]),
        n_variants_uncertified=int(out["n_variants_uncertified"]),
    )


@dataclass(frozen=True)
class CertificateCheck:
    """One estimator and rule on one task, checked on the held-back (verification) variants.

    ``acc_*``: accuracy (ties 1/k) of the held-back variants of certified / uncertified
    examples; ``worst_certified``: the lowest held-back accuracy of a certified example
    (``worst_example`` its id); ``n_below``: certified examples below ``1 - phi`` on their
    held-back variants. ``flagged``: the certified examples' pooled held-back accuracy is below
    ``1 - phi``, i.e. the rule promises more than the data show.
    """

    estimator: str
    rule: str
    rate: float
    population: float
    n_certified: int
    n_eligible: int
    acc_certified: float
    acc_uncertified: float
    bac_certified: float
    bac_uncertified: float
    worst_certified: float
    worst_example: str
    n_below: int
    flagged: bool


def certificate_checks(
    table: MarginTable,
    phi: float = DEFAULT_CERT_PHI,
    psi: float = DEFAULT_CERT_PSI,
    seed: int = 0,
    extra: CertConfig | None = None,
) -> list[CertificateCheck]:
    """Every named estimator x rule (``c``: Chebyshev/Cantelli, ``h``: Hoeffding/Bernstein), and
    ``extra`` (a custom setting) when it is not one of them."""
    out = []
    configs = [(name, CertConfig.named(name, phi=phi, psi=psi, seed=seed)) for name in ESTIMATORS]
    if extra is not None and extra.estimator == "custom":
        configs.append(("custom", extra))
    for name, config in configs:
        cert = certify(table, config)
        credit = table.var_correct()
        held = ~cert.est & cert.eligible[table.var_example]
        rules: tuple[Literal["c", "h"], ...] = ("c", "h")
        for rule in rules:
            if not cert.computable(rule):
                continue
            v = verification(cert, rule)
            flag = cert.certified_c if rule == "c" else cert.certified_h
            per_ex_sum = np.bincount(
                table.var_example[held], weights=credit[held], minlength=table.n_examples
            )
            per_ex_n = np.bincount(table.var_example[held], minlength=table.n_examples)
            sel = flag & cert.eligible & (per_ex_n > 0)
            accs = np.where(per_ex_n > 0, per_ex_sum / np.maximum(per_ex_n, 1), np.nan)
            if sel.any():
                i = int(np.flatnonzero(sel)[np.argmin(accs[sel])])
                worst, worst_id = float(accs[i]), str(table.example_ids[i])
            else:
                worst, worst_id = math.nan, ""
            out.append(
                CertificateCheck(
                    estimator=name,
                    rule=rule,
                    rate=cert.rate(rule),
                    population=cert.population(rule),
                    n_certified=v.n_certified,
                    n_eligible=cert.m,
                    acc_certified=v.acc_certified,
                    acc_uncertified=v.acc_uncertified,
                    bac_certified=v.bac_certified,
                    bac_uncertified=v.bac_uncertified,
                    worst_certified=worst,
                    worst_example=worst_id,
                    n_below=int((accs[sel] < 1.0 - phi).sum()),
                    flagged=bool(math.isfinite(v.acc_certified) and v.acc_certified < 1.0 - phi),
                )
            )
    return out
