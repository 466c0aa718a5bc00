"""Defaults that more than one module offers (a settings dataclass, a function and a command's
flag), so each setting has one value. Plain numbers: importing this costs nothing."""

from __future__ import annotations

__all__ = [
    "DEFAULT_CERT_PHI",
    "DEFAULT_CERT_PSI",
    "DEFAULT_CLEAN_MARGIN",
    "DEFAULT_FOLDS",
    "DEFAULT_GEN_FOLDS",
    "DEFAULT_GEN_K_GRID",
    "DEFAULT_GEN_LAM_GRID",
    "DEFAULT_RADII_PHI",
    "DEFAULT_RESAMPLES",
]

#: grouped cross-validation folds of the fit (ridge λ and α, ``fit --method auto``)
DEFAULT_FOLDS = 5

#: grouped folds of the choice of k and λ by held-out generation score (``--select generation``)
DEFAULT_GEN_FOLDS = 3

#: the k values (principal components) and relative λ values that ``--select generation`` tries
#: (``GenTuneSettings`` and ``fit --layer --select generation``); each value costs a pass of
#: generations per fold, so the grid is smaller than the feature-error grid of a plain layer fit
DEFAULT_GEN_K_GRID = (1, 2)
DEFAULT_GEN_LAM_GRID = (1e-4, 1e-2, 1.0)

#: how far (a score difference, 0.01 = one point) a chosen correction's held-out clean score may
#: fall below no correction's (``fit --method auto``, ``--select generation``)
DEFAULT_CLEAN_MARGIN = 0.01

#: failure ratio φ of the robustness radii ``fit`` measures (paper, Section 4)
DEFAULT_RADII_PHI = 0.05

#: the certificates' failure ratio φ and population confidence ψ (the paper's)
DEFAULT_CERT_PHI = 0.1
DEFAULT_CERT_PSI = 0.05

#: bootstrap resamples of every reported confidence interval (the paper's 10k)
DEFAULT_RESAMPLES = 10_000
