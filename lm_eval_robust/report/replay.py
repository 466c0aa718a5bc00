"""Replay label-logit corrections on a logged run, without running the model again.

A run made with ``--log_samples`` and ``collect_features=DIR`` holds, for every prompt of our
tasks, the label log-likelihoods the harness saw and the LM head's input ``x`` at the label
position. A correction changes only the label logits, by ``b(x) = ψ(x)W + β``, so the corrected
log-likelihoods follow exactly:

``ll*_j = ll_j − b_j − log(1 − Σ_k p_k + Σ_k p_k e^{−b_k})``, with ``p_k = e^{ll_k}``

(the last term renormalises the softmax over the vocabulary). Every metric reads differences of
log-likelihoods between labels, which are exact; the absolute values are exact too when each label
is one token (with a shared leading piece, as Gemma's ``" 1"`` = ``▁`` + ``1``, the shared term is
left as it was). ``lm-eval-robust replay`` writes a run folder the report reads like any other,
marked as a replay in its results file; a test checks it against a real ``debiased_hf`` run.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.base.harness_names import short_metric
from lm_eval_robust.report.replay_posthoc import ReplayError

__all__ = ["ReplayError", "corrected_loglikelihoods", "replay"]


def corrected_loglikelihoods(ll: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``ll [d]`` of the labels after subtracting ``b [d]`` from their logits."""
    from lm_eval_robust.scoring.debias import corrected_label_logprobs

    return corrected_label_logprobs(ll, b)


def _aggregators(task_results: Mapping[str, Any]) -> dict[str, Any]:
    from lm_eval_robust.stats import certify, classification, robustness

    out: dict[str, Any] = {}
    for key in task_results:
        name = short_metric(key)  # ``robust_bac_clean,none`` and an old run's ``bac_clean,none``
        for module in (classification, certify, robustness):
            fn = getattr(module, name, None)
            if callable(fn):
                out[key] = fn
    return out


def _samples_file(folder: Path, task: str, stamp: str) -> Path:
    f = folder / f"samples_{task}_{stamp}.jsonl"
    if f.is_file():
        return f
    if f.with_name(f.name + ".gz").is_file():
        return f.with_name(f.name + ".gz")
    raise ReplayError(f"{folder}: no samples file for {task}; the base run needs --log_samples")


class _FeatureFolders:
    """Each task's features under ``features_dir``, loaded once (replay reads them for the
    fingerprint, the corrections' scale check, rescoring and the bias)."""

    def __init__(self, features_dir: Path) -> None:
        self.dir = features_dir
        self._loaded: dict[Path, Any] = {}

    def has(self, task: str) -> bool:
        return (self.dir / task).is_dir()

    def at(self, folder: Path) -> Any:
        from lm_eval_robust.values.features import load_features

        if folder not in self._loaded:
            self._loaded[folder] = load_features(folder)
        return self._loaded[folder]

    def of(self, task: str) -> Any:
        if not self.has(task):
            raise ReplayError(
                f"no features for {task} in {self.dir}; rerun the base run with "
                "--model_args collect_features=DIR on the same tasks"
            )
        return self.at(self.dir / task)

    def head_rows(self, corr: Any) -> Any:
        """The LM-head rows ``corr``'s task recorded (the scale check at load time)."""
        for d in sorted(self.dir.glob(f"{corr.task}*")):
            if d.is_dir() and any(d.glob("rank*.safetensors")):
                return self.at(d).head_rows
        return None


def _rescore_table(feats: Any) -> dict[tuple[str, int], np.ndarray]:
    """``(example_id, pert_id) -> float32 logits − recorded logits`` of a half-precision run:
    adding it to the recorded log-likelihoods gives the float32 scores (the per-prompt
    normaliser is the recorded one; it is shared by the labels, so no metric depends on it)."""
    if feats.label_logits_recorded is None:
        return {}
    delta = feats.label_logits.astype(np.float64) - feats.label_logits_recorded.astype(np.float64)
    keys = zip(feats.example_id, feats.pert_id, strict=True)
    return {(str(e), int(p)): delta[i] for i, (e, p) in enumerate(keys)}


def _bias_table(feats: Any, correction: Any) -> dict[tuple[str, int], Any]:
    """``(example_id, pert_id) -> b`` for every prompt with collected features."""
    import torch

    from lm_eval_robust.scoring.debias import apply_correction

    task = feats.task
    ids = [int(t) for t in feats.label_token_ids[0]]
    if not correction.stats.get("labels_are_positions") and ids != correction.label_token_ids:
        raise ReplayError(
            f"correction for {task} scores label tokens {correction.label_token_ids} but the "
            f"features score {ids}; fit it for this task and model"
        )
    style = correction.stats.get("prompt_style")
    if style is not None and style != feats.prompt_style:
        raise ReplayError(
            f"correction for {task} was fitted on {style}-style prompts but the run is "
            f"{feats.prompt_style}-style; refit it on {feats.prompt_style} prompts"
        )
    with torch.no_grad():
        lg = torch.from_numpy(feats.label_logits)
        fixed = apply_correction(correction, torch.from_numpy(feats.x), lg)
        b = (lg - fixed).double().numpy()
    keys = zip(feats.example_id, feats.pert_id, strict=True)
    return {(str(e), int(p)): b[i] for i, (e, p) in enumerate(keys)}


def replay(
    base_run: str | Path,
    features: str | Path | None,
    correction: str | Path | None,
    out: str | Path,
    model: str | None = None,
) -> Path:
    """Write ``out/<model>/results_<stamp>.json`` and samples with ``correction`` applied.

    Label scores are float32, as ``debiased_hf`` writes them: a base run recorded in half
    precision (before label scores were float32) is first rescored from its features, and the
    corrected scores are rounded to float32, so base and replay compare at one precision.
    Without ``correction`` the run is only rescored. Without ``features`` (a run by any engine,
    ``--log_samples`` alone) only input-independent corrections apply, to the logged scores
    as they are (:mod:`lm_eval_robust.report.replay_posthoc`; ``model``: the checkpoint folder their
    fingerprint is checked against, else the one the run names). The results file records
    ``label_score_dtype`` and, per correction, its radii measured on this run's (test) features.
    The folder ``out/<model>`` appears whole or not at all (written beside it, then moved into
    place); an ``-o`` that is, or holds, the base run, its features or the correction is refused.
    """
    from lm_eval_robust.base.atomic import StagedDir

    with StagedDir() as stage:
        return _replay(base_run, features, correction, out, stage, model)


#: what a replayed run folder holds (an existing one is replaced whole only when it holds nothing
#: else)
RUN_FILES = ("results_*.json", "samples_*.jsonl", "samples_*.jsonl.gz")


def _stage(stage: Any, target: Path, *inputs: Any) -> Path:
    """Refuse an ``-o`` that would overwrite, hold or sit inside an input; the temporary folder
    that replaces ``target`` whole."""
    from lm_eval_robust.base.atomic import check_replaceable, refuse_overwrite

    names = ("base run", "features", "correction", "model folder")
    refuse_overwrite(target, "-o", zip(names, inputs, strict=True))
    check_replaceable(target, "-o", "replay", RUN_FILES)
    return Path(stage.open(target, "replayed run"))


def _replay(
    base_run: str | Path,
    features: str | Path | None,
    correction: str | Path | None,
    out: str | Path,
    stage: Any,
    model: str | None = None,
) -> Path:
    from lm_eval_robust.scoring.correction import correction_key, fit_summary, load_corrections
    from lm_eval_robust.values.pairing import _find_results, _model_args, read_results

    try:
        results_file = _find_results(Path(base_run))
        results = read_results(results_file)
    except UserError as exc:
        raise ReplayError(str(exc)) from None
    stamp = results_file.stem[len("results_") :]
    tasks = sorted((results.get("results") or {}).keys())
    applied = (results.get("lm_eval_robust_replay") or {}).get("correction") or _model_args(
        results
    ).get("correction")
    if applied:
        raise ReplayError(
            f"{results_file.parent} already applied a correction; replaying one on it would apply "
            "corrections twice: replay on the uncorrected base run instead"
        )
    base_dtype = str((results.get("config") or {}).get("label_score_dtype", ""))
    if not correction and base_dtype == "float32":
        raise ReplayError(
            f"{results_file.parent} already has float32 label scores: there is nothing to "
            "rescore; give --correction to replay a correction on it"
        )
    if features is None:
        if not correction:
            raise ReplayError(
                "nothing to replay: give --correction (a constant or calibration correction "
                "applies to the logged scores), or --features to rescore a half-precision run"
            )
        from lm_eval_robust.report.replay_posthoc import PostHoc

        post = PostHoc(_model_args(results), correction, model)
        return _replay_posthoc(results, results_file, post, correction, out, stage)
    features_dir = Path(features)
    folders = _FeatureFolders(features_dir)
    fp = next((folders.of(t).fingerprint for t in tasks if folders.has(t)), None)
    if fp is None:
        raise ReplayError(
            f"no features in {features_dir} for any task of {results_file.name}; collect them "
            "with --model_args collect_features=DIR in the base run"
        )
    first = fp

    def fingerprint_of(task: str) -> dict[str, Any]:
        """The features' own fingerprint per task (per-task LoRA adapters differ by task)."""
        return folders.of(task).fingerprint if folders.has(task) else first

    from lm_eval_robust.stats.fit.measure import measure_radii

    corrections = (
        load_corrections(str(correction), fingerprint_of, folders.head_rows) if correction else {}
    )
    target = _target(stage, out, results_file, features, correction, model)
    new_results = json.loads(json.dumps(results))
    replayed: list[str] = []
    radii_test: dict[str, dict[str, Any]] = {}
    for task in tasks:
        key = correction_key(task)
        if correction and key not in corrections:
            continue
        if not correction and not folders.has(task):
            continue
        feats = folders.of(task)
        rescore = {} if base_dtype == "float32" else _rescore_table(feats)
        if base_dtype != "float32" and not rescore:
            raise ReplayError(
                f"{results_file.name} records no float32 label scores but the features of "
                f"{task} are float32 ones; use the features collected by this run"
            )
        if correction:
            table = _bias_table(feats, corrections[key])
            corr = corrections[key]
            phi = float((corr.stats.get("radii") or {}).get("phi", 0.05))
            radii_test[key] = measure_radii(feats, corr, phi=phi)
        else:
            table = {k: np.zeros_like(v) for k, v in rescore.items()}
        src = _samples_file(results_file.parent, task, stamp)
        fix = functools.partial(_feature_fix, table, rescore)
        items = _rewrite_samples(src, target / src.name.removesuffix(".gz"), fix)
        _aggregate(new_results["results"][task], items, _bootstrap_iters(results))
        replayed.append(task)
    if not replayed:
        if not correction:
            raise ReplayError(
                f"no task of {results_file.name} ({', '.join(tasks)}) has features in "
                f"{features_dir}; give the base run's collect_features folder"
            )
        raise ReplayError(
            f"none of the corrections in {correction} ({sorted(corrections)}) is for a task of "
            f"{results_file.name} ({', '.join(tasks)})"
        )
    cfg = new_results.setdefault("config", {})
    cfg["label_score_dtype"] = "float32"
    if correction:
        _record_correction(cfg, correction)
    summaries: dict[str, dict[str, Any]] = {}
    for t in replayed if correction else []:
        key = correction_key(t)
        summaries[key] = dict(fit_summary(corrections[key]))
        summaries[key]["p_eps_V_test"] = radii_test[key]["p_eps_V"]
        summaries[key]["p_eps_L_test"] = radii_test[key]["p_eps_L"]
    new_results["lm_eval_robust_replay"] = {
        "base_run": str(results_file),
        "features": str(features_dir),
        "correction": str(correction) if correction else None,
        "rescored_from": None
        if base_dtype == "float32"
        else str(cfg.get("model_dtype") or "the model's dtype"),
        "tasks": replayed,
        # the fit's own numbers (method, λ, p_εV/p_εL on the train features) and the radii
        # measured on this run's features, for the report
        "corrections": summaries,
        "radii_test": radii_test,
    }
    return _write_results(new_results, replayed, target / results_file.name, stage)


def _feature_fix(
    table: Mapping[tuple[str, int], np.ndarray],
    rescore: Mapping[tuple[str, int], np.ndarray],
    sample: Mapping[str, Any],
    ll: np.ndarray,
    where: str,
) -> np.ndarray:
    """One logged prompt's label log-likelihoods, rescored and corrected from its features."""
    doc = sample["doc"]
    k = (str(doc["example_id"]), int(doc["pert_id"]))
    if k not in table:
        raise ReplayError(
            f"{where}: no features for example {k[0]} perturbation {k[1]}; "
            "the features come from another run or settings"
        )
    return corrected_loglikelihoods(ll + rescore[k] if rescore else ll, table[k])


def _posthoc_fix(
    post: Any, key: str, sample: Mapping[str, Any], ll: np.ndarray, where: str
) -> np.ndarray:
    """One logged prompt's label log-likelihoods with ``key``'s input-independent correction."""
    post.check(key, sample, where)
    return corrected_loglikelihoods(ll, np.asarray(post.corrections[key].beta))


def _target(
    stage: Any,
    out: str | Path,
    results_file: Path,
    features: Any,
    correction: Any,
    model: Any = None,
) -> Path:
    """The temporary folder of ``out/<model>``, refused where ``-o`` holds another run."""
    target = Path(out) / results_file.parent.name
    others = [f.name for f in target.glob("results_*.json") if f.name != results_file.name]
    if others:
        raise ReplayError(
            f"-o {out} already holds another run ({others[0]}) in {target.name}/; the report "
            "would read one of the two: choose an empty -o"
        )
    return _stage(stage, target, results_file.parent, features, correction, model)


def _rewrite_samples(src: Path, dst: Path, fix: Any) -> list[dict[str, Any]]:
    """Write ``src``'s samples to ``dst`` (gzip) with ``fix(sample, ll, where)``'s label
    log-likelihoods and the per-doc values recomputed; returns the values the metrics read."""
    from lm_eval_robust.base.atomic import write_file
    from lm_eval_robust.tasks.ni import process_results
    from lm_eval_robust.values.pairing import read_sample_lines

    items: list[dict[str, Any]] = []
    lines: list[str] = []
    for n, sample in read_sample_lines(src, ReplayError):
        try:
            ll = np.array([float(r[0][0]) for r in sample["resps"]])
            sample["doc"]["pert_id"]
        except (KeyError, IndexError, TypeError, ValueError):
            raise ReplayError(
                f"{src.name}:{n}: no logged label log-likelihoods ('resps') or doc ids; "
                "replay needs the samples of an lm_eval --log_samples run of our tasks"
            ) from None
        if not np.isfinite(ll).all():
            raise ReplayError(
                f"{src.name}:{n}: non-finite label log-likelihood {ll.tolist()}; the run "
                "is corrupt: run it again"
            )
        # float32, as debiased_hf scores labels: ties compare at one precision
        fixed = fix(sample, ll, f"{src.name}:{n}").astype(np.float32).astype(float)
        # logged as the harness logs them: strings; the greedy flag is kept as logged
        resps = [
            [[repr(float(v)), str(r[0][1])]] for v, r in zip(fixed, sample["resps"], strict=True)
        ]
        sample["resps"] = resps
        sample["filtered_resps"] = [r[0] for r in resps]
        values = process_results(sample["doc"], [(float(v), False) for v in fixed])
        if not any(k in sample for k in values):  # a run made before the ``robust_`` names
            values = {short_metric(k): v for k, v in values.items()}
        sample.update(values)
        items.append(next(iter(values.values())))
        lines.append(json.dumps(sample, ensure_ascii=False))
    # compressed, as the report reads them: a replayed run costs a tenth of the disk
    data = gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), mtime=0)
    write_file(data, dst.with_name(dst.name + ".gz"), "replayed samples", ReplayError)
    return items


def _aggregate(
    task_results: dict[str, Any], items: list[dict[str, Any]], bootstrap_iters: int
) -> None:
    """Recompute the task's metrics and their standard errors from the replayed per-doc values,
    in place: nothing of the base run's numbers is kept (a stderr without a bootstrap of its own
    becomes ``"N/A"``, as lm-eval writes it)."""
    from lm_eval_robust.stats.robustness import BOOTSTRAP_STATS
    from lm_eval_robust.stats.stderr import stderr_for

    if not any(short_metric(k) != k.split(",")[0] for k in task_results):
        # a run made before the ``robust_`` names, maybe also before ties were shown
        task_results.setdefault("tie_share,none", math.nan)
    for metric, fn in _aggregators(task_results).items():
        task_results[metric] = float(fn(items))
    for key in list(task_results):
        name = short_metric(key)  # robust_bac_clean_stderr,none and bac_clean_stderr,none
        if not name.endswith("_stderr"):
            continue
        stat = name.removesuffix("_stderr")
        if stat in BOOTSTRAP_STATS and bootstrap_iters > 0:
            task_results[key] = stderr_for(stat, bootstrap_iters)(items)
        else:
            task_results[key] = "N/A"


def _bootstrap_iters(results: Mapping[str, Any]) -> int:
    """The base run's ``bootstrap_iters`` (lm-eval's default 100000 where it is not recorded)."""
    value = (results.get("config") or {}).get("bootstrap_iters", 100_000)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 100_000


def _record_correction(cfg: dict[str, Any], correction: str | Path) -> None:
    """Name the correction in the replayed run's model args, as a real run records it."""
    args = cfg.get("model_args")
    if isinstance(args, str):
        cfg["model_args"] = (
            f"{args},correction={correction}" if args else f"correction={correction}"
        )
    elif isinstance(args, dict):
        args["correction"] = str(correction)


def _write_results(
    new_results: dict[str, Any], replayed: list[str], out_file: Path, stage: Any
) -> Path:
    from lm_eval_robust.base.atomic import write_file

    new_results["results"] = {t: new_results["results"][t] for t in replayed}
    new_results["configs"] = {t: (new_results.get("configs") or {}).get(t, {}) for t in replayed}
    text = json.dumps(new_results, indent=2, ensure_ascii=False, default=str)
    write_file(text.encode("utf-8"), out_file, "replayed results", ReplayError)
    return Path(stage.commit(out_file))


def _replay_posthoc(
    results: dict[str, Any],
    results_file: Path,
    post: Any,
    correction: str | Path,
    out: str | Path,
    stage: Any,
) -> Path:
    """Input-independent corrections on the logged label scores (no features)."""
    from lm_eval_robust.scoring.correction import correction_key, fit_summary

    stamp = results_file.stem[len("results_") :]
    tasks = sorted((results.get("results") or {}).keys())
    target = _target(stage, out, results_file, None, correction, post.folder)
    new_results = json.loads(json.dumps(results))
    replayed: list[str] = []
    for task in tasks:
        key = correction_key(task)
        if key not in post.corrections:
            continue
        src = _samples_file(results_file.parent, task, stamp)
        fix = functools.partial(_posthoc_fix, post, key)
        items = _rewrite_samples(src, target / src.name.removesuffix(".gz"), fix)
        _aggregate(new_results["results"][task], items, _bootstrap_iters(results))
        replayed.append(task)
    if not replayed:
        raise ReplayError(
            f"none of the corrections in {correction} ({sorted(post.corrections)}) is for a task "
            f"of {results_file.name} ({', '.join(tasks)})"
        )
    cfg = new_results.setdefault("config", {})
    _record_correction(cfg, correction)
    new_results["lm_eval_robust_replay"] = {
        "base_run": str(results_file),
        "features": None,
        "correction": str(correction),
        # the logged scores, corrected as they are: their precision is the base run's
        "rescored_from": None,
        "tasks": replayed,
        "corrections": {
            correction_key(t): dict(fit_summary(post.corrections[correction_key(t)]))
            for t in replayed
        },
        "radii_test": {},
    }
    return _write_results(new_results, replayed, target / results_file.name, stage)
