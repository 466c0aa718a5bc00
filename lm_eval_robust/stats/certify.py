"""The certificates as lm-eval aggregations (fractions in [0, 1]; NaN when not computable).

Task YAMLs name these functions as ``!function lm_eval_robust.stats.certify.<name>``; each
certifies the task's per-doc dicts with the default settings of
:mod:`lm_eval_robust.stats.certificates` and logs once per task why a value is n/a.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from lm_eval_robust.stats.cert_splits import exact_rate
from lm_eval_robust.stats.certificates import Certification, certify
from lm_eval_robust.stats.margins import MarginTable

log = logging.getLogger(__name__)

__all__ = ["explain_na", "p_cert_c", "p_cert_exact", "p_cert_h", "pop_cert_c", "pop_cert_h"]


_explained: set[tuple[str, str]] = set()


def explain_na(task: str, cert: Certification | None) -> None:
    """Log once per task why its certificates print as NaN in the harness table."""
    if cert is not None and (cert.computable("h") or cert.computable("c")):
        return
    reason = cert.note if cert is not None and cert.note else "no scored example"
    if (task, reason) in _explained:
        return
    _explained.add((task, reason))
    log.warning("%s: p_cert_h, p_cert_c, pop_cert_h, pop_cert_c are n/a (NaN): %s", task, reason)


def certify_items(items: Iterable[Mapping[str, Any]]) -> Certification | None:
    items = [it for it in items if it.get("ll") is not None]
    task = str(items[0].get("task", "?")) if items else "?"
    cert = certify(MarginTable.from_items(items)) if items else None
    explain_na(task, cert)
    return cert


def p_cert_h(items: Iterable[Mapping[str, Any]]) -> float:
    """Fraction of clean examples certified by the Hoeffding/Bernstein rule (paper ``p_H``/100)."""
    cert = certify_items(items)
    return math.nan if cert is None else cert.rate("h")


def p_cert_c(items: Iterable[Mapping[str, Any]]) -> float:
    """Fraction of clean examples certified by the Chebyshev (Cantelli) rule (``p_C``/100)."""
    cert = certify_items(items)
    return math.nan if cert is None else cert.rate("c")


def pop_cert_h(items: Iterable[Mapping[str, Any]]) -> float:
    """Population guarantee from the Hoeffding rule (``P_H``/100); use it on a holdout task."""
    cert = certify_items(items)
    return math.nan if cert is None else cert.population("h")


def pop_cert_c(items: Iterable[Mapping[str, Any]]) -> float:
    """Population guarantee from the Chebyshev rule (``P_C``/100); use it on a holdout task."""
    cert = certify_items(items)
    return math.nan if cert is None else cert.population("c")


def p_cert_exact(items: Iterable[Mapping[str, Any]]) -> float:
    """Fraction of clean examples certified by the finite-sample certificate (exact binomial
    bound, Benjamini-Hochberg; :mod:`.exact_cert`), mean over 50 estimation/held-back splits;
    NaN, logged once, below the K it needs (57 at phi = 0.1, alpha = 0.05)."""
    items = [it for it in items if it.get("ll") is not None]
    if not items:
        return math.nan
    rate, why = exact_rate(MarginTable.from_items(items))
    task = str(items[0].get("task", "?"))
    if why and (task, why) not in _explained:
        _explained.add((task, why))
        log.warning("%s: p_cert_exact is n/a (NaN): %s", task, why)
    return rate
