"""Intermediate-layer debiasing (paper, Appendix F.4): fit, file format, application.

From the train split, the last prompt token's state at layer ``L`` of every clean prompt ``x``
and perturbed prompt ``x̂`` (same example): differences ``d = x̂ − x``, their mean ``μ``, and the
principal axes ``H = (h_1, …, h_n)`` of the centred differences (PCA); ``φ(x) = x − μ``. The
debiasing map ``θ: Rⁿ → Rᵏ`` is the ridge of the classification issue,
``θ(Hᵀφ(x)) = −(ψ(Hᵀφ(x))W + β)`` with ``ψ(z) = [z, 1]``, fitted to the shift of the top-``k``
coordinates ``F = H_kᵀ(x̂ − x)`` (``W`` by the Gram solve, ``β`` the residual midpoint), so
``φ_debiased(x) = H(θ(Hᵀφ(x)) e_{1..k} + Hᵀφ(x))`` and the edited state is
``x + H_k θ(Hᵀφ(x))``: only the top-``k`` coordinates move, the others are untouched.

Because ``H`` is orthonormal and the ridge penalty ``λ‖W‖²`` is invariant under rotations of the
inputs, fitting on ``Hᵀφ(x)`` and fitting on ``φ(x)`` give the same predictions; we fit on
``φ(x)`` and store ``A = W[:n]`` in the original basis (``tests/test_generation_fit.py`` checks
the equivalence). λ: a number, or ``auto``: 5-fold cross-validation grouped by source example,
minimising the held-out squared error of the debiased top-``k`` shift.

A correction file is one safetensors file (tensors ``H_k [n, k]``, ``mu [n]``, ``W [n+1, k]``,
``beta [k]``; JSON metadata under ``"lm_eval_robust"`` with ``method="layer_ridge"``, the layer,
the model's number of layers, ``k``, the decode positions, the task and the model fingerprint),
written atomically, never pickled, checked against the model on load.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lm_eval_robust.scoring.correction import (
    META_KEY,
    SCHEMA_VERSION,
    CorrectionError,
    read_safetensors,
)
from lm_eval_robust.scoring.fingerprint import check_model_fingerprint
from lm_eval_robust.scoring.fit.folds import grouped_folds
from lm_eval_robust.scoring.fit.ridge import fit_ridge
from lm_eval_robust.scoring.generation.layers import POSITIONS, decoder_layers, layer_debias

__all__ = [
    "METHOD",
    "LayerCorrection",
    "apply_layer_correction",
    "fit_layer_correction",
    "load_layer_correction",
    "save_layer_correction",
]

METHOD = "layer_ridge"
LAM_GRID_REL = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


@dataclass(eq=False)
class LayerCorrection:
    """A fitted intermediate-layer correction: ``x ← x − H_k(ψ(x − μ)W + β)`` at ``layer``."""

    layer: int
    num_layers: int
    H: np.ndarray  # [n, k] top-k principal axes of the clean-perturbed differences
    mu: np.ndarray  # [n] mean difference
    W: np.ndarray  # [n+1, k]
    beta: np.ndarray  # [k]
    task: str
    positions: str = "prompt"
    lam: float = 0.0
    alpha: float = 0.0
    fingerprint: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.H.shape[1])

    @property
    def n(self) -> int:
        return int(self.H.shape[0])

    def validate(self, where: str = "layer correction") -> None:
        n, k = self.H.shape if self.H.ndim == 2 else (0, 0)
        shapes_ok = (
            self.H.ndim == 2
            and k >= 1
            and self.mu.shape == (n,)
            and self.W.shape == (n + 1, k)
            and self.beta.shape == (k,)
        )
        if not shapes_ok:
            raise CorrectionError(
                f"{where}: inconsistent shapes H {self.H.shape}, mu {self.mu.shape}, W "
                f"{self.W.shape}, beta {self.beta.shape}; re-run `lm-eval-robust fit --layer`"
            )
        for name, a in (("H", self.H), ("mu", self.mu), ("W", self.W), ("beta", self.beta)):
            if not np.isfinite(a).all():
                raise CorrectionError(f"{where}: {name} holds NaN or inf; re-fit the correction")
        if not 0 <= self.layer < self.num_layers:
            raise CorrectionError(f"{where}: layer {self.layer} outside 0..{self.num_layers - 1}")
        if self.positions not in POSITIONS:
            raise CorrectionError(
                f"{where}: unknown positions {self.positions!r}; use one of {POSITIONS}"
            )

    def shift(self, x: np.ndarray) -> np.ndarray:
        """``−H_k(ψ(x − μ)W + β)`` for states ``x [rows, n]`` (float64)."""
        z = np.asarray(x, dtype=np.float64) - self.mu
        theta = -(z @ self.W[:-1] + self.W[-1] + self.beta)
        return np.asarray(theta @ self.H.T)

    def editor(self, device: torch.device | str) -> Any:
        """The edit ``x ↦ x + H_k θ`` as a torch function, its tensors on ``device``."""
        h = torch.as_tensor(self.H, dtype=torch.float32, device=device)
        mu = torch.as_tensor(self.mu, dtype=torch.float32, device=device)
        a = torch.as_tensor(self.W[:-1], dtype=torch.float32, device=device)
        b = torch.as_tensor(self.W[-1] + self.beta, dtype=torch.float32, device=device)

        def edit(x: torch.Tensor) -> torch.Tensor:
            xf = x.to(torch.float32)
            theta = -((xf - mu) @ a + b)
            return xf + theta @ h.T

        return edit


# --------------------------------------------------------------------------------------------
# fit


def _pca_top(d: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` principal axes ``[n, k]`` of the rows of ``d`` (centred), and all variances."""
    centred = d - d.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    var = s**2 / max(len(d) - 1, 1)
    axes = vt[:k].T.copy()
    for j in range(axes.shape[1]):  # a deterministic sign: largest |entry| positive
        if axes[np.argmax(np.abs(axes[:, j])), j] < 0:
            axes[:, j] *= -1
    return axes, var


def _cv_lambda(
    z: np.ndarray, f: np.ndarray, groups: np.ndarray, z_clean: np.ndarray | None, alpha: float
) -> tuple[float, list[dict[str, float]]]:
    psi_diag = float(np.mean(np.sum(z * z, axis=1)) + 1.0) * len(z) / (z.shape[1] + 1)
    folds = grouped_folds(groups, n_folds=min(5, len(np.unique(groups))), seed=0)
    table: list[dict[str, float]] = []
    for rel in LAM_GRID_REL:
        lam = rel * psi_diag
        err = 0.0
        for fold in np.unique(folds):
            tr, te = folds != fold, folds == fold
            fit = fit_ridge(z[tr], f[tr], z_clean, lam=lam, alpha=alpha)
            pred = z[te] @ fit.W[:-1] + fit.W[-1] + fit.beta
            err += float(np.sum((f[te] - pred) ** 2))
        table.append({"lam": lam, "lam_rel": rel, "mse": err / len(z)})
    best = min(table, key=lambda r: (r["mse"], -r["lam"]))
    return best["lam"], table


def fit_layer_correction(
    x_clean: np.ndarray,
    x_pert: np.ndarray,
    pair: Sequence[int],
    groups: Sequence[str],
    *,
    layer: int,
    num_layers: int,
    task: str,
    k: int = 1,
    lam: float | None = None,
    alpha: float = 0.0,
    positions: str = "prompt",
    fingerprint: dict[str, Any] | None = None,
) -> LayerCorrection:
    """Fit the correction from clean states ``[m, n]`` and perturbed states ``[r, n]``.

    ``pair[i]`` is the row of ``x_clean`` holding perturbed row ``i``'s clean prompt, ``groups[i]``
    its source example (for the grouped CV of ``lam=None``, i.e. ``auto``).
    """
    xc = np.asarray(x_clean, dtype=np.float64)
    xp = np.asarray(x_pert, dtype=np.float64)
    idx = np.asarray(pair, dtype=np.int64)
    if xp.ndim != 2 or xc.ndim != 2 or xp.shape[1] != xc.shape[1] or len(idx) != len(xp):
        raise CorrectionError(
            f"clean states {xc.shape} and perturbed states {xp.shape} (pairs {len(idx)}) do not "
            "match; collect both from the same model and layer"
        )
    if not (np.isfinite(xc).all() and np.isfinite(xp).all()):
        raise CorrectionError(
            "layer states hold NaN or inf; run the model in float32 (--model-args dtype=float32)"
        )
    n = xp.shape[1]
    if not 1 <= k <= min(n, len(xp)):
        raise CorrectionError(
            f"k={k} principal components asked for, but there are {len(xp)} differences of "
            f"size {n}; choose 1 <= k <= {min(n, len(xp))}"
        )
    diffs = xp - xc[idx]
    mu = diffs.mean(axis=0)
    h, var = _pca_top(diffs, k)
    target = diffs @ h  # F = H_kᵀ(x̂ − x)
    z = xp - mu  # φ(x̂)
    z_clean = xc - mu if alpha > 0 else None
    g = np.asarray([str(v) for v in groups])
    table: list[dict[str, float]] = []
    if lam is None:
        if len(np.unique(g)) >= 2:
            lam, table = _cv_lambda(z, target, g, z_clean, alpha)
        else:
            lam = 1e-2 * float(np.mean(np.sum(z * z, axis=1)) + 1.0) * len(z) / (n + 1)
    fit = fit_ridge(z, target, z_clean, lam=lam, alpha=alpha)
    corr = LayerCorrection(
        layer=int(layer),
        num_layers=int(num_layers),
        H=h,
        mu=mu,
        W=np.asarray(fit.W),
        beta=np.asarray(fit.beta),
        task=task,
        positions=positions,
        lam=float(lam),
        alpha=float(alpha),
        fingerprint=dict(fingerprint or {}),
    )
    after = xp + corr.shift(xp)
    corr.stats = {
        "n_pert": len(xp),
        "n_clean": len(xc),
        "explained_variance_top_k": float(var[:k].sum() / max(var.sum(), 1e-30)),
        "mean_shift_norm": float(np.linalg.norm(mu)),
        "top_k_shift_rms_before": float(np.sqrt(np.mean(target**2))),
        "top_k_shift_rms_after": float(np.sqrt(np.mean(((after - xc[idx]) @ h) ** 2))),
        "lambda_table": table,
    }
    corr.validate()
    return corr


# --------------------------------------------------------------------------------------------
# files


def save_layer_correction(corr: LayerCorrection, path: str | os.PathLike[str]) -> Path:
    """One safetensors file, written atomically (tensors + JSON metadata)."""
    from safetensors.numpy import save as st_save

    corr.validate()
    meta = {
        "schema": SCHEMA_VERSION,
        "method": METHOD,
        "task": corr.task,
        "layer": corr.layer,
        "num_layers": corr.num_layers,
        "k": corr.k,
        "positions": corr.positions,
        "lam": corr.lam,
        "alpha": corr.alpha,
        "fingerprint": corr.fingerprint,
        "stats": corr.stats,
    }
    tensors = {
        "H": np.ascontiguousarray(corr.H),
        "mu": np.ascontiguousarray(corr.mu),
        "W": np.ascontiguousarray(corr.W),
        "beta": np.ascontiguousarray(corr.beta),
    }
    data = st_save(tensors, metadata={META_KEY: json.dumps(meta, sort_keys=True)})
    from lm_eval_robust.base.atomic import write_file

    return write_file(data, Path(path), "correction", CorrectionError)


def load_layer_correction(path: str | os.PathLike[str]) -> LayerCorrection:
    """Read a file written by :func:`save_layer_correction` (one-line errors)."""
    tensors, meta = read_safetensors(path)
    if meta.get("method") != METHOD:
        raise CorrectionError(
            f"{path} is a {meta.get('method')!r} correction, not an intermediate-layer one; "
            "pass it as correction= (or fit one with `lm-eval-robust fit --layer L`)"
        )
    missing = [t for t in ("H", "mu", "W", "beta") if t not in tensors]
    if missing:
        raise CorrectionError(f"{path} lacks tensors {missing}; re-run `lm-eval-robust fit`")
    try:
        corr = LayerCorrection(
            layer=int(meta["layer"]),
            num_layers=int(meta["num_layers"]),
            H=tensors["H"],
            mu=tensors["mu"],
            W=tensors["W"],
            beta=tensors["beta"],
            task=str(meta["task"]),
            positions=str(meta.get("positions", "prompt")),
            lam=float(meta.get("lam") or 0.0),
            alpha=float(meta.get("alpha") or 0.0),
            fingerprint=dict(meta.get("fingerprint") or {}),
            stats=dict(meta.get("stats") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorrectionError(f"{path}: malformed metadata ({exc!r}); re-run fit") from None
    corr.validate(where=str(path))
    return corr


def check_layer_correction(
    corr: LayerCorrection, fingerprint: dict[str, Any], model: torch.nn.Module
) -> None:
    """Refuse a correction fitted for another model, layer count or hidden size."""
    check_model_fingerprint(corr.fingerprint, fingerprint)
    n_layers = len(decoder_layers(model))
    if corr.num_layers != n_layers:
        raise CorrectionError(
            f"correction for layer {corr.layer} was fitted on a model with {corr.num_layers} "
            f"layers but this model has {n_layers}; re-run `lm-eval-robust fit --layer` for it"
        )
    hidden = fingerprint.get("hidden_size")
    if hidden is not None and int(hidden) != corr.n:
        raise CorrectionError(
            f"correction has hidden size {corr.n} but this model has {hidden}; re-run fit"
        )


def load_layer_corrections(
    path: str | os.PathLike[str], fingerprint: dict[str, Any], model: torch.nn.Module
) -> dict[str, LayerCorrection]:
    """Layer corrections by task key from a file or a directory of ``*.safetensors`` files."""
    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    if not files:
        raise CorrectionError(f"no *.safetensors layer corrections in {p}; write them with fit")
    out: dict[str, LayerCorrection] = {}
    for f in files:
        corr = load_layer_correction(f)
        check_layer_correction(corr, fingerprint, model)
        if corr.task in out:
            raise CorrectionError(
                f"two layer corrections for task {corr.task!r} in {p}; keep one per task"
            )
        out[corr.task] = corr
    return out


@contextmanager
def apply_layer_correction(
    model: torch.nn.Module, corr: LayerCorrection, positions: str | None = None
) -> Iterator[dict[str, int]]:
    """The correction as a hook on its layer (tensors on that layer's device) for a block."""
    blocks = decoder_layers(model)
    if not 0 <= corr.layer < len(blocks):
        raise CorrectionError(
            f"correction is for layer {corr.layer} but the model has {len(blocks)} decoder "
            "layers; re-run `lm-eval-robust fit --layer` for this model"
        )
    param = next(blocks[corr.layer].parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    with layer_debias(
        model, corr.layer, corr.editor(device), positions or corr.positions
    ) as counts:
        yield counts
