"""A correction is data: one safetensors file with the fitted bias and the model it belongs to.

``Correction`` holds the label-logit bias ``b(x) = ψ(x)W + β`` (``W`` None for a constant offset),
the label tokens it applies to, the task, the fit's hyper-parameters and a fingerprint of the model
(:mod:`lm_eval_robust.scoring.fingerprint`). :func:`save` writes one ``.safetensors`` file
atomically (tensors ``W`` and ``beta``; everything else as JSON under the metadata key
``"lm_eval_robust"``), :func:`load` reads it back with one-line :class:`CorrectionError` messages,
:func:`check_fingerprint` refuses a correction fitted for another model, task or label set, and
:func:`load_corrections` gathers a folder of them by task. The maths that use a correction (a hook
on the label logits, new LM-head rows) are :mod:`lm_eval_robust.scoring.debias`.

One concept, the correction as a file, in one module of a little over 500 lines: the dataclass,
its validation and its serialisation change together whenever a field is added.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from lm_eval_robust.base.errors import FIT_HINT, CorrectionError
from lm_eval_robust.base.harness_names import short_task
from lm_eval_robust.scoring.fingerprint import check_model_fingerprint

from .fit.ridge import PSI_KINDS, RidgeFit, psi_dim

__all__ = [
    "META_KEY",
    "SCHEMA_VERSION",
    "Correction",
    "CorrectionError",
    "check_fingerprint",
    "correction_key",
    "fit_summaries",
    "fit_summary",
    "load",
    "load_corrections",
    "read_safetensors",
    "save",
]

META_KEY = "lm_eval_robust"
SCHEMA_VERSION = 1
_PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}


class ConstantOffset(Protocol):
    """What a constant correction takes from
    :class:`lm_eval_robust.stats.fit.constant.ConstantSearch`."""

    @property
    def b(self) -> float | None: ...

    @property
    def reason(self) -> str: ...

    @property
    def at_b(self) -> dict[str, float] | None: ...

    def beta(self) -> np.ndarray | None: ...


def _package_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return f"lm-eval-robust {version('lm-eval-robust')}"
    except PackageNotFoundError:
        pass
    import importlib

    pkg = importlib.import_module("lm_eval_robust")  # the package root holds __version__
    ver = getattr(pkg, "__version__", None)
    return f"lm-eval-robust {ver}" if ver else "lm-eval-robust (version unknown)"


@dataclass(eq=False)
class Correction:
    """A fitted label-logit correction: debiased logits are ``M(x) − (ψ(x)W + β)``.

    ``W`` is float ``[n+1, d]`` (``psi="linear"``, mergeable into the LM head) or ``[n+2, d]``
    (``psi="norm"``), or None for an input-independent offset; ``beta`` is ``[d]``. Column ``k``
    belongs to ``labels[k]`` / ``label_token_ids[k]``.
    """

    method: str
    W: np.ndarray | None
    beta: np.ndarray
    label_token_ids: list[int]
    labels: list[str]
    task: str
    psi: str = "linear"
    lam: float | None = None
    alpha: float | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    created_by: str = field(default_factory=_package_version)

    @property
    def d(self) -> int:
        """Number of labels."""
        return int(np.asarray(self.beta).shape[0])

    @property
    def n(self) -> int | None:
        """Hidden size the correction expects (None for a constant offset without fingerprint)."""
        if self.W is not None:
            return int(self.W.shape[0]) - (1 if self.psi == "linear" else 2)
        hs = self.fingerprint.get("hidden_size")
        return int(hs) if hs is not None else None

    @property
    def mergeable(self) -> bool:
        """True when the correction can be folded into the LM head (linear ψ or no W)."""
        return self.W is None or self.psi == "linear"

    def validate(self, where: str = "correction") -> None:
        """Raise :class:`CorrectionError` naming the first inconsistent field or shape."""
        if not isinstance(self.method, str) or not self.method:
            raise CorrectionError(
                f"{where}: method must be a non-empty string; got {self.method!r}"
            )
        if self.psi not in PSI_KINDS:
            raise CorrectionError(f"{where}: psi must be one of {PSI_KINDS}; got {self.psi!r}")
        beta = np.asarray(self.beta)
        if beta.ndim != 1 or beta.shape[0] == 0:
            raise CorrectionError(
                f"{where}: beta must be a non-empty 1-D array; got shape {beta.shape}"
            )
        d = beta.shape[0]
        if len(self.label_token_ids) != d or len(self.labels) != d:
            raise CorrectionError(
                f"{where}: beta has {d} entries but there are {len(self.label_token_ids)} label "
                f"token ids and {len(self.labels)} labels"
            )
        if not np.issubdtype(beta.dtype, np.floating) or not np.isfinite(beta).all():
            raise CorrectionError(f"{where}: beta must be finite floats")
        if self.W is not None:
            w = np.asarray(self.W)
            if w.ndim != 2 or w.shape[1] != d:
                raise CorrectionError(
                    f"{where}: W must have shape [n+{1 if self.psi == 'linear' else 2}, {d}]; "
                    f"got {w.shape}"
                )
            if not np.issubdtype(w.dtype, np.floating) or not np.isfinite(w).all():
                raise CorrectionError(f"{where}: W must be finite floats")
            if w.shape[0] < (2 if self.psi == "linear" else 3):
                raise CorrectionError(
                    f"{where}: W has too few rows ({w.shape[0]}) for psi={self.psi!r}"
                )
            hs = self.fingerprint.get("hidden_size")
            if hs is not None and w.shape[0] != psi_dim(int(hs), self.psi):
                raise CorrectionError(
                    f"{where}: W has shape {w.shape} but psi={self.psi!r} with hidden size {hs} "
                    f"needs ({psi_dim(int(hs), self.psi)}, {d})"
                )

    # -- constructors from fits ---------------------------------------------------------------
    @classmethod
    def from_ridge(
        cls,
        fit: RidgeFit,
        *,
        label_token_ids: list[int],
        labels: list[str],
        task: str,
        fingerprint: dict[str, Any],
        stats: dict[str, Any] | None = None,
    ) -> Correction:
        """A ``method="ridge"`` correction from
        :func:`~lm_eval_robust.scoring.fit.ridge.fit_ridge`."""
        st: dict[str, Any] = {"n_rows": fit.n_rows, "n_clean": fit.n_clean}
        if fit.residual_half_range is not None:
            st["residual_half_range"] = [float(v) for v in fit.residual_half_range]
        st.update(stats or {})
        return cls(
            method="ridge",
            W=np.asarray(fit.W),
            beta=np.asarray(fit.beta),
            label_token_ids=[int(t) for t in label_token_ids],
            labels=[str(s) for s in labels],
            task=task,
            psi=fit.psi,
            lam=fit.lam,
            alpha=fit.alpha,
            fingerprint=dict(fingerprint),
            stats=st,
        )

    @classmethod
    def from_constant(
        cls,
        search: ConstantOffset,
        *,
        label_token_ids: list[int],
        labels: list[str],
        task: str,
        fingerprint: dict[str, Any],
        stats: dict[str, Any] | None = None,
    ) -> Correction:
        """A ``method="constant"`` correction (``β = [−b/2, +b/2]``) from a constant search."""
        beta = search.beta()
        if beta is None:
            raise CorrectionError(f"constant search chose no offset: {search.reason}")
        st: dict[str, Any] = {"b": search.b, "reason": search.reason, **(search.at_b or {})}
        st.update(stats or {})
        return cls(
            method="constant",
            W=None,
            beta=beta,
            label_token_ids=[int(t) for t in label_token_ids],
            labels=[str(s) for s in labels],
            task=task,
            psi="linear",
            fingerprint=dict(fingerprint),
            stats=st,
        )


# --------------------------------------------------------------------------------------------
# save / load


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _metadata(c: Correction) -> str:
    meta = {
        "schema": SCHEMA_VERSION,
        "method": c.method,
        "label_token_ids": [int(t) for t in c.label_token_ids],
        "labels": [str(s) for s in c.labels],
        "task": c.task,
        "psi": c.psi,
        "lam": None if c.lam is None else float(c.lam),
        "alpha": None if c.alpha is None else float(c.alpha),
        "fingerprint": c.fingerprint,
        "stats": c.stats,
        "created_by": c.created_by,
        "has_W": c.W is not None,
    }
    try:
        return json.dumps(meta, sort_keys=True, ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError) as e:
        raise CorrectionError(f"correction metadata is not JSON serialisable: {e}") from e


def save(correction: Correction, path: str | os.PathLike[str]) -> Path:
    """Write ``correction`` to ONE safetensors file, atomically.

    Through :func:`lm_eval_robust.base.atomic.write_file`: on any failure an existing target is left
    untouched. Arrays keep their dtype (float64 from a ridge fit).
    """
    from safetensors.numpy import save as st_save

    correction.validate()
    tensors = {"beta": np.ascontiguousarray(correction.beta)}
    if correction.W is not None:
        tensors["W"] = np.ascontiguousarray(correction.W)
    data = st_save(tensors, metadata={META_KEY: _metadata(correction)})
    from lm_eval_robust.base.atomic import write_file

    return write_file(data, Path(path), "correction", CorrectionError)


def _looks_like_pickle(head: bytes, p: Path) -> bool:
    if head[:4] == b"PK\x03\x04":  # torch.save zip archive (holds a pickle)
        return True
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:  # pickle protocol 2-5
        return True
    return p.suffix.lower() in _PICKLE_SUFFIXES


def _header(raw: bytes) -> dict[str, Any] | None:
    """The parsed safetensors JSON header, or None when ``raw`` is not laid out as safetensors."""
    if len(raw) < 8:
        return None
    (hlen,) = struct.unpack("<Q", raw[:8])
    if hlen == 0 or 8 + hlen > len(raw) or raw[8:9] != b"{":
        return None
    try:
        header = json.loads(raw[8 : 8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return header if isinstance(header, dict) else None


def read_safetensors(
    path: str | os.PathLike[str],
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Tensors and our JSON metadata of a correction file (any kind), with one-line errors."""
    from safetensors.numpy import load as st_load

    p = Path(path)
    if not p.exists():
        raise CorrectionError(
            f"correction file not found: {p}; check the path given as correction=, or write it "
            "with `lm-eval-robust fit`"
        )
    if p.is_dir():
        raise CorrectionError(f"{p} is a directory; expected a .safetensors correction file")
    from lm_eval_robust.base.validate import read_bytes

    raw = read_bytes(p, "correction file", f"pass a readable file; {FIT_HINT}", CorrectionError)
    header = _header(raw)
    if header is None:
        if _looks_like_pickle(raw[:8], p):
            raise CorrectionError(
                f"{p} is a pickle file; corrections are safetensors files written by "
                "`lm-eval-robust fit`"
            )
        raise CorrectionError(
            f"{p} is not a valid safetensors file (truncated or corrupt header, {len(raw)} bytes); "
            f"{FIT_HINT} to write it again"
        )
    try:
        tensors = st_load(raw)
    except Exception as e:  # safetensors raises its own error types for bad offsets / truncation
        msg = " ".join(str(e).split())
        raise CorrectionError(
            f"{p} is not a valid safetensors file (truncated or corrupt: {msg}); "
            f"{FIT_HINT} to write it again"
        ) from e
    meta_all = header.get("__metadata__") or {}
    if META_KEY not in meta_all:
        raise CorrectionError(
            f"{p} has no '{META_KEY}' metadata: it is a safetensors file but not a correction "
            "written by `lm-eval-robust fit`"
        )
    try:
        meta = json.loads(meta_all[META_KEY])
    except json.JSONDecodeError as e:
        raise CorrectionError(f"{p}: '{META_KEY}' metadata is not valid JSON ({e.msg})") from e
    if not isinstance(meta, dict):
        raise CorrectionError(f"{p}: '{META_KEY}' metadata must be a JSON object")
    schema = meta.get("schema")
    if not isinstance(schema, int) or schema > SCHEMA_VERSION:
        raise CorrectionError(
            f"{p} uses correction schema {schema!r}; this lm-eval-robust reads schema "
            f"<= {SCHEMA_VERSION} (upgrade lm-eval-robust or {FIT_HINT})"
        )
    return dict(tensors), meta


def load(path: str | os.PathLike[str]) -> Correction:
    """Read a correction written by :func:`save`; :class:`CorrectionError` says what is wrong."""
    p = Path(path)
    tensors, meta = read_safetensors(p)
    if meta.get("method") == "layer_ridge":
        raise CorrectionError(
            f"{p} is an intermediate-layer correction (layer {meta.get('layer')}); pass it as "
            "layer_correction= instead of correction="
        )
    required = ("method", "label_token_ids", "labels", "task", "psi")
    missing = [k for k in required if k not in meta]
    if missing:
        raise CorrectionError(f"{p}: metadata lacks {', '.join(missing)}; {FIT_HINT}")
    if "beta" not in tensors:
        raise CorrectionError(f"{p} has no 'beta' tensor; {FIT_HINT}")
    w = tensors.get("W")
    if meta.get("has_W", w is not None) and w is None:
        raise CorrectionError(
            f"{p}: metadata says the correction has W but the 'W' tensor is missing"
        )
    try:
        corr = Correction(
            method=meta["method"],
            W=w,
            beta=tensors["beta"],
            label_token_ids=[int(t) for t in meta["label_token_ids"]],
            labels=[str(s) for s in meta["labels"]],
            task=str(meta["task"]),
            psi=meta["psi"],
            lam=meta.get("lam"),
            alpha=meta.get("alpha"),
            fingerprint=dict(meta.get("fingerprint") or {}),
            stats=dict(meta.get("stats") or {}),
            created_by=str(meta.get("created_by", "unknown")),
        )
    except (TypeError, ValueError) as e:
        raise CorrectionError(f"{p}: malformed metadata ({e})") from e
    corr.validate(where=str(p))
    return corr


# --------------------------------------------------------------------------------------------
# the model, task and labels a correction belongs to


def check_fingerprint(
    correction: Correction,
    fingerprint: dict[str, Any],
    task: str | None = None,
    label_token_ids: list[int] | None = None,
) -> None:
    """Raise :class:`CorrectionError` if ``correction`` belongs to another model, task or labels.

    Compares the identity fields of the two fingerprints (``architecture``, ``hidden_size``,
    ``vocab_size``, ``head_sha256``, ``head_bias_sha256``, ``tokenizer_sha256``; fields absent from
    either side are skipped), then the task name and the label token ids (order matters: column
    ``k`` of the correction is label ``k``).
    """
    check_model_fingerprint(correction.fingerprint or {}, fingerprint)
    if task is not None and task != correction.task:
        raise CorrectionError(
            f"correction was fitted for task {correction.task!r} but is applied to task {task!r}; "
            f"{FIT_HINT} for task {task!r}"
        )
    if label_token_ids is not None:
        given = [int(t) for t in label_token_ids]
        if given != list(correction.label_token_ids):
            raise CorrectionError(
                f"correction label token ids {correction.label_token_ids} (labels "
                f"{correction.labels}, task {correction.task!r}) differ from this task's label "
                f"token ids {given}; {FIT_HINT} for this task"
            )


# --------------------------------------------------------------------------------------------
# fit summaries and corrections per task


def fit_summary(c: Correction) -> dict[str, Any]:
    """What a report shows of a correction's fit: the method, λ, α, the train examples, and the
    mean percentage decrease of the robustness radii over the label logits on the train
    features (``p_eps_V``, ``p_eps_L``; paper, Section 4)."""
    radii = dict(c.stats.get("radii") or {})
    if radii and "gamma_after" not in radii:
        # fitted before radii were measured per correction kind with the corrected head rows:
        # its p_eps_L reused the base rows (about 0 by construction), so it is not shown
        radii.pop("p_eps_L", None)
    values = {
        "method": c.method,
        "lam": c.lam,
        "alpha": c.alpha,
        "n_examples": c.stats.get("n_examples"),
        "p_eps_V": radii.get("p_eps_V"),
        "p_eps_L": radii.get("p_eps_L"),
    }
    return {k: v for k, v in values.items() if v is not None}


def fit_summaries(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """:func:`fit_summary` by task of a correction file or a folder of them (no model needed)."""
    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        corr = load(f)
        out[corr.task] = fit_summary(corr)
    return out


_SPLIT_SUFFIXES = ("_train", "_holdout")


def _numpy(t: Any) -> np.ndarray:
    """A tensor or array as a float64 numpy array."""
    if hasattr(t, "detach"):
        t = t.detach().float().cpu().numpy()
    return np.asarray(t, dtype=np.float64)


def correction_key(task_name: str) -> str:
    """The task family a correction belongs to: the harness task name without its split suffix.

    A correction fitted on ``ni065_format_pert_train`` applies to ``ni065_format_pert`` (test) and
    ``ni065_format_pert_holdout``. A generation task's key drops the ``robust_`` namespace too
    (``robust_nq_open_text_pert_train`` -> ``nq_open_text_pert``), so corrections fitted before the
    namespace and after it are found under the same key.
    """
    task_name = short_task(task_name)
    for suffix in _SPLIT_SUFFIXES:
        if task_name.endswith(suffix):
            return task_name[: -len(suffix)]
    return task_name


def load_corrections(
    path: str | os.PathLike[str],
    fingerprint: dict[str, Any] | Callable[[str], dict[str, Any]],
    head: Any = None,
) -> dict[str, Correction]:
    """Corrections by task key from a file or a directory of ``*.safetensors`` files.

    Every correction is checked against the model's fingerprint (``fingerprint(task)`` when it
    depends on the task, as with per-task LoRA adapters) and, given the LM ``head``, against the
    logits' own scale (:func:`lm_eval_robust.base.validate.check_correction_scale`); two files for
    one task are an error.
    """
    from lm_eval_robust.base.validate import check_correction_scale

    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.safetensors"))
        if not files:
            raise CorrectionError(
                f"no *.safetensors correction files in {p}; write them with `lm-eval-robust fit`"
            )
    else:
        files = [p]
    out: dict[str, Correction] = {}
    for f in files:
        corr = load(f)
        check_fingerprint(corr, fingerprint(corr.task) if callable(fingerprint) else fingerprint)
        if head is not None:  # the LM head's weight [vocab, n], or corr -> label rows [d, n]
            rows = head(corr) if callable(head) else head[corr.label_token_ids]
            if rows is not None:
                check_correction_scale(corr, _numpy(rows), str(f), CorrectionError)
        if corr.task in out:
            raise CorrectionError(
                f"two corrections for task {corr.task!r} in {p}; keep one per task"
            )
        out[corr.task] = corr
    return out
