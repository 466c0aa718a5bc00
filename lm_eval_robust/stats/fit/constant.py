"""Input-independent debiasing for binary tasks (paper Section 5.1.1, Figure 3, Appendix C).

Parametrisation. A binary task's prediction depends only on the decision variable
``z(x) = M_1(x) − M_0(x)`` (label 1's logit minus label 0's; label ``k`` is column ``k`` of the
label-logit arrays), and adding the same constant to both logits changes nothing. So the search is
over ONE scalar ``b`` applied to the decision variable: ``z*(x) = z(x) − b``, i.e. predict label 1
iff ``z(x̂) − b > 0``. As per-label offsets this is ``β = [−b/2, +b/2]``
(:meth:`ConstantSearch.beta`), the split of smallest magnitude; any split with ``β_1 − β_0 = b``
predicts the same.

The radii are those of the decision neuron: with ``f_z = f_1 − f_0`` and per-example means
``μ_x = mean_j f_z``, ``C*(b) = max_x |μ_x − b|`` (Theorem C.2), ``V`` is unchanged by a constant,
``ε_V(b) = C*(b) + sqrt(V·m/φ)`` and ``ε_L(b) = C*(b) + c·γ·sqrt(2n·ln(2m/φ))`` with
``γ = ‖w_1 − w_0‖`` (:func:`decision_gamma`), the Lipschitz constant of ``z``.

Selection (on TRAIN only). Grid ``b ∈ [−C, C]`` (``C = C*(0)``, 201 points by default). The
"improvement regions" are the grid points at or above the 90th percentile of perturbed-prompt BAC
and at or below the 10th percentile of each radius (the 90th percentile of improvement). ``b`` is
chosen in the overlap of the three regions: the highest BAC there, then the smallest ``C*``, then
the smallest ``|b|``. With no overlap, ``b`` is None with a plain reason (the paper's "–" rows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .radii import example_stats

__all__ = [
    "ConstantSearch",
    "constant_search",
    "decision_gamma",
    "plot_constant_search",
]


@dataclass(eq=False)
class ConstantSearch:
    """Curves over the grid of ``b`` and the chosen offset (None with ``reason`` when no overlap).

    ``at_b`` (when ``b`` is chosen) has the chosen point's ``bac_pert``, ``delta_pert`` (vs b=0),
    ``eps_V``, ``eps_L``, ``p_eps_V``, ``p_eps_L`` (percentage decrease vs b=0) and, when clean
    logits were given, ``bac_clean`` and ``delta_clean``. ``baseline`` holds the b=0 values.
    """

    grid: np.ndarray
    bac: np.ndarray
    eps_V: np.ndarray
    eps_L: np.ndarray | None
    C_star: np.ndarray
    C: float
    V: float
    m: int
    phi: float
    gamma: float | None
    c: float | None
    n: int | None
    percentile: float
    threshold_bac: float
    threshold_eps_V: float
    threshold_eps_L: float | None
    region_bac: np.ndarray
    region_eps_V: np.ndarray
    region_eps_L: np.ndarray | None
    overlap: np.ndarray
    b: float | None
    reason: str
    baseline: dict[str, float] = field(default_factory=dict)
    at_b: dict[str, float] | None = None

    def beta(self) -> np.ndarray | None:
        """Per-label offsets ``[−b/2, +b/2]`` to subtract from ``[M_0, M_1]`` (None if no b)."""
        if self.b is None:
            return None
        return np.array([-self.b / 2.0, self.b / 2.0])


def decision_gamma(head_weight: Any, label_token_ids: Sequence[int]) -> float:
    """``γ = ‖w_1 − w_0‖₂`` for the LM-head rows of the two label tokens (numpy or torch)."""
    ids = [int(t) for t in label_token_ids]
    if len(ids) != 2:
        raise ValueError(f"a binary task has 2 label tokens; got {len(ids)}")
    if hasattr(head_weight, "detach"):
        rows = head_weight[ids].detach().float().cpu().numpy()
    else:
        rows = np.asarray(head_weight)[ids]
    rows = np.asarray(rows, np.float64)
    return float(np.linalg.norm(rows[1] - rows[0]))


def _decision(a: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim == 2 and arr.shape[1] == 2:
        arr = arr[:, 1] - arr[:, 0]
    elif arr.ndim != 1:
        raise ValueError(
            f"{name} must be [rows, 2] (label 0, label 1) or [rows] (label 1 minus label 0); "
            f"got shape {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN/inf in {int((~np.isfinite(arr)).sum())} rows")
    return arr


def _bac_curve(z: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """BAC of "predict 1 iff z − b > 0" for every b in grid (sorting, O((N + G) log N))."""
    recalls = []
    z1 = np.sort(z[y == 1])
    z0 = np.sort(z[y == 0])
    if z1.size:
        recalls.append((z1.size - np.searchsorted(z1, grid, side="right")) / z1.size)
    if z0.size:
        recalls.append(np.searchsorted(z0, grid, side="right") / z0.size)
    if not recalls:
        raise ValueError("no labelled rows")
    return np.mean(recalls, axis=0)


def _labels01(labels: ArrayLike, rows: int, name: str) -> np.ndarray:
    y = np.asarray(labels).reshape(-1)
    if y.shape[0] != rows:
        raise ValueError(f"{name} has {y.shape[0]} rows; expected {rows}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{name} must be 0 or 1 (index of the gold label) for a binary task")
    return y.astype(np.int64)


def _describe(grid: np.ndarray, mask: np.ndarray) -> str:
    if not mask.any():
        return "none"
    return f"b in [{grid[mask].min():.3g}, {grid[mask].max():.3g}]"


def constant_search(
    logits_pert: ArrayLike,
    f: ArrayLike,
    labels: ArrayLike,
    example_ids: ArrayLike,
    *,
    gamma: float | None = None,
    c: float | None = None,
    n: int | None = None,
    m: int | None = None,
    phi: float = 0.05,
    n_grid: int = 201,
    percentile: float = 90.0,
    logits_clean: ArrayLike | None = None,
    labels_clean: ArrayLike | None = None,
    ddof: int = 0,
) -> ConstantSearch:
    """Search the constant offset ``b`` on the decision variable (see the module docstring).

    Inputs are TRAIN rows of perturbed prompts: ``logits_pert`` and ``f`` as ``[rows, 2]`` label
    logits / shifts (or ``[rows]`` decision values ``label 1 − label 0``), gold ``labels`` in
    {0, 1} and ``example_ids``. ``gamma`` (:func:`decision_gamma`), ``c``
    (:func:`~lm_eval_robust.stats.fit.radii.perturbation_bound`) and the hidden size ``n`` enable
    ``ε_L``; without them only BAC and ``ε_V`` define the overlap. ``m`` defaults to the number of
    examples. ``logits_clean``/``labels_clean`` (optional) only add the clean BAC to
    ``at_b``/``baseline``.
    """
    if n_grid < 3:
        raise ValueError(f"n_grid must be at least 3; got {n_grid}")
    if not 50.0 <= percentile < 100.0:
        raise ValueError(f"percentile must be in [50, 100); got {percentile}")
    z = _decision(logits_pert, "logits_pert")
    fz = _decision(f, "f")
    if fz.shape[0] != z.shape[0]:
        raise ValueError(f"f has {fz.shape[0]} rows; logits_pert has {z.shape[0]}")
    y = _labels01(labels, z.shape[0], "labels")
    st = example_stats(fz, example_ids, ddof=ddof)
    mu = st.mean[:, 0]
    V = float(np.nanmax(st.var[:, 0])) if np.isfinite(st.var[:, 0]).any() else 0.0
    mm = int(m) if m is not None else len(st.example_ids)
    if mm < 1 or not 0.0 < phi <= 1.0:
        raise ValueError(f"need m >= 1 and phi in (0, 1]; got m={mm}, phi={phi}")
    C = float(np.max(np.abs(mu)))
    lip = [gamma is not None, c is not None, n is not None]
    if any(lip) and not all(lip):
        raise ValueError("eps_L needs all of gamma, c and n")
    use_l = all(lip)

    def c_star(b: np.ndarray) -> np.ndarray:
        return np.maximum(mu.max() - b, b - mu.min())

    var_term = math.sqrt(V * mm / phi)
    lip_term = (
        float(c) * float(gamma) * math.sqrt(2.0 * int(n) * math.log(2.0 * mm / phi))  # type: ignore[arg-type]
        if use_l
        else 0.0
    )

    grid = np.linspace(-C, C, n_grid)
    if n_grid % 2:
        grid[n_grid // 2] = 0.0  # exactly b = 0 in the middle
    bac = _bac_curve(z, y, grid)
    cs = c_star(grid)
    eps_v = cs + var_term
    eps_l = cs + lip_term if use_l else None

    zero = np.array([0.0])
    base_cs = float(c_star(zero)[0])
    baseline: dict[str, float] = {
        "bac_pert": float(_bac_curve(z, y, zero)[0]),
        "C": base_cs,
        "eps_V": base_cs + var_term,
    }
    if use_l:
        baseline["eps_L"] = base_cs + lip_term
    zc = yc = None
    if logits_clean is not None:
        if labels_clean is None:
            raise ValueError("logits_clean needs labels_clean")
        zc = _decision(logits_clean, "logits_clean")
        yc = _labels01(labels_clean, zc.shape[0], "labels_clean")
        baseline["bac_clean"] = float(_bac_curve(zc, yc, zero)[0])

    def tol(a: np.ndarray) -> float:
        return 1e-12 * max(1.0, float(np.max(np.abs(a))))

    thr_bac = float(np.percentile(bac, percentile))
    thr_v = float(np.percentile(eps_v, 100.0 - percentile))
    reg_bac = bac >= thr_bac - tol(bac)
    reg_v = eps_v <= thr_v + tol(eps_v)
    thr_l: float | None = None
    reg_l: np.ndarray | None = None
    overlap = reg_bac & reg_v
    if eps_l is not None:
        thr_l = float(np.percentile(eps_l, 100.0 - percentile))
        reg_l = eps_l <= thr_l + tol(eps_l)
        overlap &= reg_l

    top = f"top {100.0 - percentile:g}%"
    chosen: float | None = None
    at_b: dict[str, float] | None = None
    if C == 0.0:
        overlap[:] = False
        reason = "C = 0: every example's mean shift is 0 on train; nothing to debias"
    elif not overlap.any():
        parts = [f"BAC {_describe(grid, reg_bac)}", f"eps_V {_describe(grid, reg_v)}"]
        if reg_l is not None:
            parts.insert(1, f"eps_L {_describe(grid, reg_l)}")
        reason = (
            f"no overlap: no b in [-C, C] = [{-C:.3g}, {C:.3g}] is in the {top} of perturbed BAC "
            f"and of {'both radii' if use_l else 'eps_V'} at once ({'; '.join(parts)})"
        )
    else:
        idx = np.flatnonzero(overlap)
        best = idx[np.lexsort((np.abs(grid[idx]), cs[idx], -bac[idx]))[0]]
        chosen = float(grid[best])
        radii_txt = "eps_L and eps_V" if use_l else "eps_V (eps_L not computed)"
        reason = (
            f"b = {chosen:.4g}: highest perturbed BAC ({bac[best]:.3f}) among {idx.size} grid "
            f"points in the {top} of BAC and of {radii_txt}"
        )
        at_b = {
            "bac_pert": float(bac[best]),
            "delta_pert": float(bac[best] - baseline["bac_pert"]),
            "C": float(cs[best]),
            "eps_V": float(eps_v[best]),
            "p_eps_V": _pct(baseline["eps_V"], float(eps_v[best])),
        }
        if eps_l is not None:
            at_b["eps_L"] = float(eps_l[best])
            at_b["p_eps_L"] = _pct(baseline["eps_L"], float(eps_l[best]))
        if zc is not None and yc is not None:
            bc = float(_bac_curve(zc, yc, np.array([chosen]))[0])
            at_b["bac_clean"] = bc
            at_b["delta_clean"] = bc - baseline["bac_clean"]

    return ConstantSearch(
        grid=grid,
        bac=bac,
        eps_V=eps_v,
        eps_L=eps_l,
        C_star=cs,
        C=C,
        V=V,
        m=mm,
        phi=float(phi),
        gamma=float(gamma) if gamma is not None else None,
        c=float(c) if c is not None else None,
        n=int(n) if n is not None else None,
        percentile=float(percentile),
        threshold_bac=thr_bac,
        threshold_eps_V=thr_v,
        threshold_eps_L=thr_l,
        region_bac=reg_bac,
        region_eps_V=reg_v,
        region_eps_L=reg_l,
        overlap=overlap,
        b=chosen,
        reason=reason,
        baseline=baseline,
        at_b=at_b,
    )


def _pct(before: float, after: float) -> float:
    return 100.0 * (before - after) / before if before != 0 else math.nan


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Index ranges [start, end] of consecutive True values."""
    out: list[tuple[int, int]] = []
    start = None
    for i, v in enumerate(mask.tolist()):
        if v and start is None:
            start = i
        if not v and start is not None:
            out.append((start, i - 1))
            start = None
    if start is not None:
        out.append((start, len(mask) - 1))
    return out


def _shade(ax: Any, grid: np.ndarray, mask: np.ndarray, color: str, label: str) -> None:
    step = (grid[1] - grid[0]) / 2 if grid.size > 1 else 0.0
    for k, (a, b) in enumerate(_runs(mask)):
        ax.axvspan(
            grid[a] - step,
            grid[b] + step,
            color=color,
            alpha=0.2,
            lw=0,
            label=label if k == 0 else None,
        )


def plot_constant_search(result: ConstantSearch, path: str | Path) -> Path:
    """Write a Figure-3-like PNG: perturbed BAC (left) and ε_L, ε_V (right) against ``b``, with the
    top-percentile regions shaded, their overlap hatched and the chosen ``b`` marked."""
    # The Agg canvas through Figure directly: no pyplot, no change to the global backend.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(path)
    g = result.grid
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    top = f"top {100 - result.percentile:g}%"
    ax1.plot(g, result.bac, color="tab:red", lw=1.5, label="perturbed BAC")
    _shade(ax1, g, result.region_bac, "tab:red", f"BAC {top}")
    ax1.axhline(result.baseline["bac_pert"], color="grey", ls=":", lw=1, label="BAC at b = 0")
    ax1.set_xlabel("b (subtracted from logit[1] − logit[0])")
    ax1.set_ylabel("balanced accuracy")
    ax1.set_title("Perturbed-prompt BAC (train)")

    ax2.plot(g, result.eps_V, color="tab:green", lw=1.5, label="ε_V(φ)")
    _shade(ax2, g, result.region_eps_V, "tab:green", f"ε_V {top}")
    ax3 = None
    if result.eps_L is not None and result.region_eps_L is not None:
        ax3 = ax2.twinx()
        ax3.plot(g, result.eps_L, color="tab:blue", lw=1.5, ls="--", label="ε_L(φ)")
        ax3.set_ylabel("ε_L(φ)", color="tab:blue")
        _shade(ax2, g, result.region_eps_L, "tab:blue", f"ε_L {top}")
    ax2.set_xlabel("b")
    ax2.set_ylabel("ε_V(φ)", color="tab:green")
    ax2.set_title(f"Robustness radii (φ = {result.phi:g}, m = {result.m})")

    for ax in (ax1, ax2):
        if result.overlap.any():
            for a, b in _runs(result.overlap):
                ax.axvspan(g[a], g[b], facecolor="none", hatch="//", edgecolor="black", lw=0)
        if result.b is not None:
            ax.axvline(result.b, color="black", lw=1.2, label=f"chosen b = {result.b:.3g}")
    handles, labels = ax2.get_legend_handles_labels()
    if ax3 is not None:
        h3, l3 = ax3.get_legend_handles_labels()
        handles, labels = handles + h3, labels + l3
    ax2.legend(handles, labels, fontsize=7, loc="best")
    ax1.legend(fontsize=7, loc="best")
    title = result.reason if len(result.reason) <= 110 else result.reason[:107] + "..."
    fig.suptitle(title, fontsize=8)
    import io

    from lm_eval_robust.base.atomic import write_file

    buf = io.BytesIO()
    fig.savefig(buf, dpi=120, format="png")
    return write_file(buf.getvalue(), out, "the search plot")
