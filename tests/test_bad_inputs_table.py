# ruff: noqa: E501
"""Bad inputs (issue 16), table-driven: each row is one bad input, its one-line message, and a
check that nothing on disk changed (every file under the test's folder and the model folder has
the bytes it had before; no file appears or disappears, no temporary file is left).

Rows run either the command line (exit status 2, exactly one ``lm-eval-robust: error:`` line) or
a Python entry point (a :class:`UserError` with a one-line message). The folder ``w`` of each row
holds: ``model`` (a copy of the tiny random Llama), ``corr.safetensors`` (a valid correction for
it), ``feats/<task>_train`` and ``feats_test/<task>`` (synthetic feature shards), ``run`` (a
synthetic logged run) and ``rfeats`` (its features), plus whatever the row's setup adds.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_bad_inputs import FAKE_FP, SMALL, TASK, _correction, _write_run, _write_shard

from lm_eval_robust.base.errors import UserError
from lm_eval_robust.cli import main as cli_main
from lm_eval_robust.scoring.correction import save

# ---------------------------------------------------------------------------------------------
# the world each row starts from


@pytest.fixture(scope="module")
def tiny_fp(tiny_model_dir: Path, data_dir: Path) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_robust.scoring.fingerprint import model_fingerprint

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    fp = model_fingerprint(model, tok)
    fp["adapter_sha256"] = None
    return fp


def _run_with_features(root: Path) -> None:
    """A logged run of ni065_format_pert and its features (FAKE_FP), for replay."""
    _write_run(root / "runroot")
    shutil.move(str(root / "runroot"), str(root / "run"))
    _write_shard(root / "rfeats" / "ni065_format_pert", task="ni065_format_pert")
    fake = _correction(FAKE_FP, task="ni065_format_pert", ids=[7, 9])
    save(fake, root / "rcorr.safetensors")


@pytest.fixture(autouse=True, scope="module")
def _quiet_loading() -> None:
    """transformers' weight-loading progress bar would add lines to stderr."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


@pytest.fixture
def w(tmp_path: Path, tiny_model_dir: Path, tiny_fp: dict[str, Any]) -> Path:
    shutil.copytree(tiny_model_dir, tmp_path / "model")
    save(_correction(tiny_fp, ids=[7, 9]), tmp_path / "corr.safetensors")
    _write_shard(tmp_path / "feats" / f"{TASK}_train")
    _write_shard(tmp_path / "feats_test" / TASK, task=TASK)
    _run_with_features(tmp_path)
    return tmp_path


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root``: a file's sha256, or 'dir' / 'fifo' / 'other'."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link"
        elif p.is_dir():
            out[rel] = "dir"
        elif p.is_fifo():
            out[rel] = "fifo"
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "other"
    return out


# ---------------------------------------------------------------------------------------------
# setups used by several rows


def _fifo(w: Path, name: str) -> Path:
    p = w / name
    p.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(p)
    return p


def _big_correction(w: Path, fp: dict[str, Any], *, scale: float, constant: bool = False) -> Path:
    c = _correction(fp, ids=[7, 9])
    if constant:
        c.beta = np.array([scale, -scale])
    else:
        c.W = np.full_like(c.W, scale)
    return save(c, w / "big.safetensors")


def _deny(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    """Opening ``target`` fails with EACCES (the tests run as root, where chmod does not)."""
    import lm_eval_robust.base.validate as v

    real = v.os.open

    def fake(path: Any, flags: int, *a: Any, **k: Any) -> int:
        if Path(path).resolve() == target.resolve():
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, flags, *a, **k)

    monkeypatch.setattr(v.os, "open", fake)


def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    import lm_eval_robust.scoring.correction as c

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(c.os, "fsync", fsync)


def _lm(w: Path, **kw: Any) -> Any:
    from lm_eval_robust.scoring.model import DebiasedHFLM

    args = {"pretrained": str(w / "model"), "batch_size": 8, "device": "cpu", **kw}
    args.setdefault("dtype", "float32")
    return DebiasedHFLM(**args)


def _items(n_examples: int, pert_rounds: dict[int, int]) -> list[dict[str, Any]]:
    """Per-doc items: every example clean, round r on the first ``pert_rounds[r]`` examples."""
    out = []
    for e in range(n_examples):
        pids = [0] + [r for r, k in pert_rounds.items() if e < k]
        for pid in pids:
            gold = e % 2
            pred = gold if pid == 0 else 1 - gold
            out.append(
                {
                    "task": "ni065",
                    "example_id": f"e{e}",
                    "pert_id": pid,
                    "gold": gold,
                    "pred": pred,
                    "margin": 1.0,
                    "ll": [0.0, -1.0] if pred == 0 else [-1.0, 0.0],
                }
            )
    return out


def _docs(**md: Any) -> Any:
    from lm_eval_robust.tasks.ni import NIConfig, build_docs

    return build_docs("ni065", "format", "test", NIConfig.from_metadata({**SMALL, **md}))


def _gen_config(md: dict[str, Any]) -> Any:
    from lm_eval_robust.tasks.generation.tasks import GenConfig

    return GenConfig.from_metadata(md)


# ---------------------------------------------------------------------------------------------
# the table


@dataclass
class Case:
    id: str
    patterns: tuple[str, ...]
    argv: Callable[[Path], list[str]] | None = None  # a command line ...
    call: Callable[[Path, dict[str, Any]], Any] | None = None  # ... or a Python entry point
    setup: Callable[[Path, dict[str, Any], pytest.MonkeyPatch], None] = field(
        default=lambda w, fp, mp: None
    )
    prefix: str = "lm-eval-robust: error: "


def _fit(w: Path, *extra: str, feats: str = f"feats/{TASK}_train") -> list[str]:
    return ["fit", "--task", TASK, "--features", str(w / feats), "--lam", "1", *extra]


def _export(w: Path) -> list[str]:
    return ["export", "--pretrained", str(w / "model"), "--correction", str(w / "corr.safetensors")]


def _replay(w: Path, out: Path) -> list[str]:
    corr = str(w / "rcorr.safetensors")
    feats = str(w / "rfeats")
    return ["replay", str(w / "run"), "--features", feats, "--correction", corr, "-o", str(out)]


CASES: list[Case] = [
    # --- data loss: outputs that are inputs -------------------------------------------------
    Case(
        "replay-o-is-base-run",
        (r"-o .*run/tiny is the base run", r"choose another -o"),
        argv=lambda w: _replay(w, w / "run"),
    ),
    Case(
        "replay-o-is-base-run-dotted",
        (r"is the base run", r"choose another -o"),
        argv=lambda w: _replay(w, w / "rfeats" / ".." / "run"),
    ),
    Case(
        "export-o-is-pretrained",
        (r"-o .*model is the model folder", r"choose another -o"),
        argv=lambda w: [*_export(w), "-o", str(w / "model")],
    ),
    Case(
        "export-o-is-pretrained-slash",
        (r"is the model folder", r"choose another -o"),
        argv=lambda w: [*_export(w), "-o", str(w / "model") + "/"],
    ),
    Case(
        "export-o-holds-pretrained",
        (r"holds the model folder", r"choose another -o"),
        argv=lambda w: [*_export(w), "-o", str(w)],
    ),
    Case(
        "export-o-is-correction",
        (r"is the correction", r"choose another -o"),
        argv=lambda w: [*_export(w), "-o", str(w / "corr.safetensors")],
    ),
    Case(
        "fit-o-is-a-feature-shard",
        (r"is the feature shard", r"choose another -o"),
        argv=lambda w: [*_fit(w), "-o", str(w / "feats" / f"{TASK}_train" / "rank0.safetensors")],
    ),
    Case(
        "fit-o-is-the-features-folder",
        (r"is the features", r"choose another -o"),
        argv=lambda w: [*_fit(w), "-o", str(w / "feats" / f"{TASK}_train")],
    ),
    # --- silent wrong numbers ------------------------------------------------------------------
    Case(
        "limit-cuts-first-round",
        (r"no example is complete", r"use --limit 14 or another multiple of 7"),
        call=lambda w, fp: __import__(
            "lm_eval_robust.stats.classification"
        ).stats.classification.delta_drop(_items(7, {1: 1})),
    ),
    Case(
        "limit-cuts-first-round-certify",
        (r"no example is complete", r"--limit 20"),
        call=lambda w, fp: __import__("lm_eval_robust.stats.certify").stats.certify.p_cert_h(
            _items(10, {1: 3})
        ),
    ),
    Case(
        "limit-cuts-first-round-report",
        (r"no example is complete", r"--limit 16"),
        argv=lambda w: [
            "report",
            str(w / "cut"),
            "-o",
            str(w / "rep"),
            "--resamples",
            "100",
            "--no-plots",
            "--quiet",
        ],
        setup=lambda w, fp, mp: _cut_run(w),
        prefix="lm-eval-robust report: error: ",
    ),
    Case(
        "metadata-misspelt-n_perturbation",
        (r"unknown setting 'n_perturbation'", r"did you mean 'n_perturbations'"),
        call=lambda w, fp: _docs(n_perturbation=20),
    ),
    Case(
        "metadata-misspelt-textrate",
        (r"unknown setting 'textrate'", r"did you mean 'text_rate'"),
        call=lambda w, fp: _docs(textrate=0.1),
    ),
    Case(
        "metadata-misspelt-prompt-style",
        (r"unknown setting 'promptstyle'", r"did you mean 'prompt_style'"),
        call=lambda w, fp: _docs(promptstyle="chat"),
    ),
    Case(
        "metadata-n-perturbations-1e9-generation",
        (r"nq_open_text: .* more than half of this machine", r"lower n_perturbations"),
        call=lambda w, fp: __import__(
            "lm_eval_robust.tasks.generation.tasks"
        ).tasks.generation.tasks.build_docs(
            "nq_open",
            "text",
            "test",
            _gen_config({"n_examples": 20, "n_train": 5, "n_perturbations": 10**9}),
        ),
    ),
    Case(
        "metadata-unknown-key",
        (r"unknown setting 'colour'", r"valid: data_dir, .*n_perturbations"),
        call=lambda w, fp: _docs(colour="red"),
    ),
    Case(
        "metadata-misspelt-generation",
        (r"unknown setting 'n_fit_perturbation'", r"did you mean 'n_fit_perturbations'"),
        call=lambda w, fp: _gen_config({"n_fit_perturbation": 5}),
    ),
    Case(
        "metadata-misspelt-cli-fit",
        (r"unknown setting 'n_exmples'", r"did you mean 'n_examples'"),
        argv=lambda w: [
            "fit",
            "--task",
            TASK,
            "--method",
            "contextual_calibration",
            "--pretrained",
            str(w / "model"),
            "--model-args",
            "dtype=float32",
            "--metadata",
            '{"n_exmples": 10}',
            "-o",
            str(w / "c.safetensors"),
        ],
    ),
    Case(
        "prefix-cache-maybe",
        (r"prefix_cache='maybe' is not a boolean", r"prefix_cache=true or prefix_cache=false"),
        call=lambda w, fp: _lm(w, prefix_cache="maybe"),
    ),
    Case(
        "prefix-cache-empty",
        (r"prefix_cache='' is not a boolean", r"prefix_cache=true"),
        call=lambda w, fp: _lm(w, prefix_cache=""),
    ),
    Case(
        "prefix-cache-2",
        (r"prefix_cache='2' is not a boolean", r"prefix_cache=false"),
        call=lambda w, fp: _lm(w, prefix_cache="2"),
    ),
    Case(
        "fit-on-test-split-features",
        (r"from ni322_format_pert, not a _train split", r"--any-split"),
        argv=lambda w: [*_fit(w, feats=f"feats_test/{TASK}"), "-o", str(w / "c.safetensors")],
    ),
    Case(
        "fit-negative-alpha",
        (r"--alpha must be a number >= 0", r"'auto'"),
        argv=lambda w: [*_fit(w, "--alpha", "-0.01"), "-o", str(w / "c.safetensors")],
    ),
    Case(
        "fit-settings-negative-alpha",
        (r"alpha must be a number >= 0", r"auto"),
        call=lambda w, fp: __import__("lm_eval_robust.stats.fit.run").stats.fit.run.FitSettings(
            alpha=-0.01
        ),
    ),
    Case(
        "fit-nan-alpha",
        (r"--alpha must be a number >= 0", r"'auto'"),
        argv=lambda w: [*_fit(w, "--alpha", "nan"), "-o", str(w / "c.safetensors")],
    ),
    Case(
        "layer-negative",
        (r"layer -3 is negative", r"between 0 and 17"),
        call=lambda w, fp: __import__(
            "lm_eval_robust.scoring.generation.layers"
        ).scoring.generation.layers.resolve_layers("-3", 18),
    ),
    Case(
        "layer-negative-in-list",
        (r"layer -1 is negative", r"'sweep'"),
        call=lambda w, fp: __import__(
            "lm_eval_robust.scoring.generation.layers"
        ).scoring.generation.layers.resolve_layers("0,-1", 4),
    ),
    Case(
        "correction-swamps-logits-W",
        (r"shifts label logits by up to .* times the logits' own scale", r"refit it"),
        call=lambda w, fp: _lm(w, correction=str(w / "big.safetensors")),
        setup=lambda w, fp, mp: _big_correction(w, fp, scale=1e30) and None,
    ),
    Case(
        "correction-swamps-logits-beta",
        (r"times the logits' own scale", r"refit it"),
        call=lambda w, fp: _lm(w, correction=str(w / "big.safetensors")),
        setup=lambda w, fp, mp: _big_correction(w, fp, scale=1e12, constant=True) and None,
    ),
    Case(
        "correction-swamps-logits-export",
        (r"times the logits' own scale", r"refit it"),
        argv=lambda w: [
            "export",
            "--pretrained",
            str(w / "model"),
            "--correction",
            str(w / "big.safetensors"),
            "-o",
            str(w / "out"),
        ],
        setup=lambda w, fp, mp: _big_correction(w, fp, scale=1e30) and None,
    ),
    # --- tracebacks and hangs ----------------------------------------------------------------
    Case(
        "unknown-model-arg",
        (r"unknown model arg 'colour'", r"README"),
        call=lambda w, fp: _lm(w, colour="red"),
    ),
    Case(
        "misspelt-model-arg",
        (r"unknown model arg 'batchsize'", r"did you mean 'batch_size'"),
        call=lambda w, fp: _lm(w, batchsize=8),
    ),
    Case(
        "misspelt-model-arg-correction",
        (r"unknown model arg 'corection'", r"did you mean 'correction'"),
        call=lambda w, fp: _lm(w, corection="x"),
    ),
    Case(
        "model-arg-bad-dtype",
        (r"dtype= 'float13' is not a dtype", r"float32"),
        call=lambda w, fp: _lm(w, dtype="float13"),
    ),
    Case(
        "model-arg-bad-torch-dtype",
        (r"torch_dtype= 'int7' is not a dtype", r"bfloat16"),
        call=lambda w, fp: _lm(w, torch_dtype="int7"),
    ),
    Case(
        "fit-model-args-unknown",
        (r"unknown model arg 'devise'", r"did you mean 'device'"),
        argv=lambda w: [
            "fit",
            "--task",
            TASK,
            "--method",
            "contextual_calibration",
            "--pretrained",
            str(w / "model"),
            "--model-args",
            "devise=cpu",
            "-o",
            str(w / "c.safetensors"),
        ],
    ),
    Case(
        "pretrained-empty-folder",
        (r"pretrained=.*empty is a folder without config.json \(it is empty\)", r"save_pretrained"),
        call=lambda w, fp: _lm(w, pretrained=str(w / "empty")),
        setup=lambda w, fp, mp: (w / "empty").mkdir(),
    ),
    Case(
        "pretrained-folder-without-config",
        (r"without config.json \(it holds notes.txt\)", r"hub id"),
        call=lambda w, fp: _lm(w, pretrained=str(w / "notmodel")),
        setup=lambda w, fp, mp: (
            ((w / "notmodel").mkdir(), (w / "notmodel" / "notes.txt").write_text("x")) and None
        ),
    ),
    Case(
        "pretrained-a-plain-file",
        (r"pretrained=.* is a file", r"model folder"),
        call=lambda w, fp: _lm(w, pretrained=str(w / "corr.safetensors")),
    ),
    Case(
        "export-empty-model-folder",
        (r"without config.json", r"save_pretrained"),
        argv=lambda w: [
            "export",
            "--pretrained",
            str(w / "empty"),
            "--correction",
            str(w / "corr.safetensors"),
            "-o",
            str(w / "out"),
        ],
        setup=lambda w, fp, mp: (w / "empty").mkdir(),
    ),
    Case(
        "export-dtype-float13",
        (r"--dtype 'float13' is not a dtype", r"float16|float32"),
        argv=lambda w: [*_export(w), "--dtype", "float13", "-o", str(w / "out")],
    ),
    Case(
        "export-dtype-int8",
        (r"--dtype 'int8' is not a dtype", r"use one of auto, float32"),
        argv=lambda w: [*_export(w), "--dtype", "int8", "-o", str(w / "out")],
    ),
    Case(
        "unreadable-task-file",
        (r"cannot read task file .*task065.* \(permission denied\)", r"make it readable"),
        call=lambda w, fp: _docs(data_dir=str(w / "data")),
        setup=lambda w, fp, mp: _ni_copy(w, mp, deny=True),
    ),
    Case(
        "task-file-is-a-folder",
        (r"task file .*task065.* is a folder", r"data_dir"),
        call=lambda w, fp: _docs(data_dir=str(w / "data")),
        setup=lambda w, fp, mp: (
            w / "data" / "task065_timetravel_consistent_sentence_classification.json"
        ).mkdir(parents=True),
    ),
    Case(
        "task-file-is-a-fifo",
        (r"task file .*task065.* is not a regular file \(a FIFO", r"data_dir"),
        call=lambda w, fp: _docs(data_dir=str(w / "data")),
        setup=lambda w, fp, mp: (
            _fifo(w, "data/task065_timetravel_consistent_sentence_classification.json") and None
        ),
    ),
    Case(
        "unreadable-correction-file",
        (
            r"cannot read correction file .* \(permission denied\)",
            r"check the path given as correction=",
        ),
        call=lambda w, fp: _lm(w, correction=str(w / "corr.safetensors")),
        setup=lambda w, fp, mp: _deny(mp, w / "corr.safetensors"),
    ),
    Case(
        "correction-is-a-fifo",
        (r"correction file .*fifo.safetensors is not a regular file", r"check the path"),
        call=lambda w, fp: _lm(w, correction=str(w / "fifo.safetensors")),
        setup=lambda w, fp, mp: _fifo(w, "fifo.safetensors") and None,
    ),
    Case(
        "correction-is-a-fifo-load",
        (r"is not a regular file \(a FIFO", r"fit"),
        call=lambda w, fp: __import__("lm_eval_robust.scoring.correction").scoring.correction.load(
            w / "fifo.safetensors"
        ),
        setup=lambda w, fp, mp: _fifo(w, "fifo.safetensors") and None,
    ),
    Case(
        "correction-is-a-fifo-export",
        (r"is not a regular file \(a FIFO", r"fit"),
        argv=lambda w: [
            "export",
            "--pretrained",
            str(w / "model"),
            "--correction",
            str(w / "fifo.safetensors"),
            "-o",
            str(w / "out"),
        ],
        setup=lambda w, fp, mp: _fifo(w, "fifo.safetensors") and None,
    ),
    Case(
        "layer-correction-is-a-fifo",
        (r"layer_correction file .* is not a regular file", r"check the path"),
        call=lambda w, fp: _lm(w, layer_correction=str(w / "fifo.safetensors")),
        setup=lambda w, fp, mp: _fifo(w, "fifo.safetensors") and None,
    ),
    Case(
        "lora-missing",
        (r"lora=.*nope not found", r"check the path given as lora="),
        call=lambda w, fp: _lm(w, lora=str(w / "nope")),
    ),
    Case(
        "correction-missing-folder",
        (r"correction=.*nope not found", r"check the path given as correction="),
        call=lambda w, fp: _lm(w, correction=str(w / "nope")),
    ),
    Case(
        "feature-shard-is-a-fifo",
        (r"feature shard .*rank1.safetensors is not a regular file", r"collect again"),
        argv=lambda w: [*_fit(w), "-o", str(w / "c.safetensors")],
        setup=lambda w, fp, mp: _fifo(w, f"feats/{TASK}_train/rank1.safetensors") and None,
    ),
    Case(
        "feature-shard-unreadable",
        (r"cannot read feature shard .* \(permission denied\)", r"collect again"),
        argv=lambda w: [*_fit(w), "-o", str(w / "c.safetensors")],
        setup=lambda w, fp, mp: _deny(mp, w / "feats" / f"{TASK}_train" / "rank0.safetensors"),
    ),
    Case(
        "full-disk-under-fit-o",
        (
            r"cannot write correction to .*c.safetensors \(No space left on device\)",
            r"free space or choose another path with -o",
        ),
        argv=lambda w: [*_fit(w), "-o", str(w / "c.safetensors")],
        setup=lambda w, fp, mp: _full_disk(mp),
    ),
    Case(
        "full-disk-over-an-existing-correction",
        (r"No space left on device.*previous file is unchanged", r"free space"),
        argv=lambda w: [*_fit(w), "-o", str(w / "corr.safetensors")],
        setup=lambda w, fp, mp: _full_disk(mp),
    ),
    Case(
        "stale-shard-of-another-task",
        (
            r"stale feature shard\(s\) rank0.safetensors .* another collection than rank1.safetensors",
            r"delete them",
        ),
        argv=lambda w: [*_fit(w), "-o", str(w / "c.safetensors")],
        setup=lambda w, fp, mp: _stale(w, task="ni065_format_pert_train"),
    ),
    Case(
        "stale-shard-same-prompts-twice",
        (r"stale feature shard\(s\) rank0.safetensors", r"collect into an empty folder"),
        argv=lambda w: [*_fit(w), "-o", str(w / "c.safetensors")],
        setup=lambda w, fp, mp: _stale(w),
    ),
    Case(
        "stale-shard-other-hidden-size",
        (r"stale feature shard\(s\) rank0.safetensors", r"delete them"),
        argv=lambda w: [*_fit(w), "-o", str(w / "c.safetensors")],
        setup=lambda w, fp, mp: _stale(w, n=16),
    ),
    Case(
        "n-perturbations-1e9",
        (
            r"docs need about .* GiB, more than half of this machine",
            r"lower n_perturbations \(at most about \d+\)",
        ),
        call=lambda w, fp: _docs(n_perturbations=10**9),
    ),
    Case(
        "n-perturbations-1e9-text",
        (r"more than half of this machine", r"lower n_perturbations"),
        call=lambda w, fp: __import__("lm_eval_robust.tasks.ni").tasks.ni.build_docs(
            "ni322",
            "text",
            "train",
            __import__("lm_eval_robust.tasks.ni").tasks.ni.NIConfig.from_metadata(
                {"n_examples": 10, "n_perturbations": 10**9}
            ),
        ),
    ),
]


def _ni_copy(w: Path, mp: pytest.MonkeyPatch, deny: bool) -> None:
    name = "task065_timetravel_consistent_sentence_classification.json"
    src = Path(os.environ["LM_EVAL_ROBUST_DATA_DIR"]) / "natural-instructions" / "tasks" / name
    (w / "data").mkdir()
    shutil.copy(src, w / "data" / name)
    if deny:
        _deny(mp, w / "data" / name)


def _stale(w: Path, task: str = f"{TASK}_train", n: int = 8) -> None:
    """rank0 from an earlier collection beside a newer rank1."""
    folder = w / "feats" / f"{TASK}_train"
    old = folder / "rank0.safetensors"
    new = folder / "rank1.safetensors"
    old.rename(new)
    _write_shard(folder, task=task, n=n)  # writes rank0.safetensors
    os.utime(old, (1_000_000_000, 1_000_000_000))


def _cut_run(w: Path) -> None:
    """A logged run whose --limit cut the first perturbation round (1 of 8 examples has it)."""
    root = _write_run(w / "cutroot")
    folder = root / "tiny"
    samples = next(folder.glob("samples_*.jsonl"))
    lines = [json.loads(x) for x in samples.read_text().splitlines()]
    kept = [s for s in lines if s["doc"]["pert_id"] == 0 or s["doc"]["example_id"] == "e0"]
    kept = [s for s in kept if s["doc"]["pert_id"] <= 1]
    samples.write_text("".join(json.dumps(s) + "\n" for s in kept))
    shutil.move(str(root), str(w / "cut"))


def check_case(
    case: Case,
    w: Path,
    tiny_fp: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    """Run one row: its one-line message, and every file under ``w`` as it was."""
    case.setup(w, tiny_fp, monkeypatch)
    before = snapshot(w)
    if case.argv is not None:
        argv = case.argv(w)
        capsys.readouterr()
        code = cli_main(argv)
        err = capsys.readouterr().err
        assert code == 2, (code, err)
        assert err.endswith("\n") and err.count("\n") == 1, repr(err)
        msg = err.rstrip("\n")
        assert msg.startswith(case.prefix), msg
    else:
        assert case.call is not None
        with pytest.raises(UserError) as info:
            case.call(w, tiny_fp)
        msg = str(info.value)
        assert msg and "\n" not in msg and msg == msg.strip(), repr(msg)
    for pat in case.patterns:
        assert re.search(pat, msg), f"{pat!r} not in {msg!r}"
    assert snapshot(w) == before  # nothing written, changed or left behind
    return msg


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(
    case: Case,
    w: Path,
    tiny_fp: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    check_case(case, w, tiny_fp, monkeypatch, capsys)


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


# ---------------------------------------------------------------------------------------------
# folders appear whole or not at all


def _tree(root: Path) -> dict[str, str]:
    return snapshot(root) if root.exists() else {}


def test_export_failing_mid_write_leaves_the_previous_folder(
    w: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import PreTrainedModel

    out = w / "exported"
    argv = [*_export(w), "-o", str(out)]
    assert cli_main(argv) == 0
    first = _tree(out)
    assert "config.json" in first and not list(w.glob(".exported*"))

    def half_then_full_disk(self: Any, path: str, **kw: Any) -> None:
        (Path(path) / "model.safetensors").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", half_then_full_disk)
    capsys.readouterr()
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "unchanged" in err
    assert _tree(out) == first  # the previous export, byte for byte
    assert sorted(p.name for p in w.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_export_killed_mid_write(w: Path) -> None:
    """SIGKILL while writing: the previous folder stays; the next export removes the leftover."""
    out = w / "exported"
    assert cli_main([*_export(w), "-o", str(out)]) == 0
    first = _tree(out)
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from transformers import PreTrainedModel\n"
        "def slow(self, path, **kw):\n"
        "    (Path(path) / 'model.safetensors').write_bytes(b'partial')\n"
        "    print('writing', flush=True)\n"
        "    time.sleep(60)\n"
        "PreTrainedModel.save_pretrained = slow\n"
        "from lm_eval_robust.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *_export(w), "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert _tree(out) == first
    leftovers = [p for p in w.iterdir() if p.name.startswith(".exported")]
    assert len(leftovers) == 1 and (leftovers[0] / "model.safetensors").read_bytes() == b"partial"
    assert cli_main([*_export(w), "-o", str(out)]) == 0  # the next run cleans up
    assert not [p for p in w.iterdir() if p.name.startswith(".exported")]
    assert (out / "config.json").is_file()


def test_replay_into_a_fresh_folder_then_again(w: Path) -> None:
    from lm_eval_robust.report.replay import replay

    # the synthetic run has no resps: replay stops while scoring, and leaves nothing behind
    before = _tree(w)
    with pytest.raises((KeyError, UserError)):
        replay(w / "run", w / "rfeats", w / "rcorr.safetensors", w / "replayed")
    assert _tree(w) == before


# ---------------------------------------------------------------------------------------------
# the good inputs next to the bad ones still work


@pytest.mark.parametrize("word", ["true", "True", "yes", "on", "y", "1", "t"])
def test_boolean_spellings_true(word: str) -> None:
    from lm_eval_robust.base.validate import parse_bool

    assert parse_bool(word, "prefix_cache") is True


@pytest.mark.parametrize("word", ["false", "No", "off", "n", "0", "f"])
def test_boolean_spellings_false(word: str) -> None:
    from lm_eval_robust.base.validate import parse_bool

    assert parse_bool(word, "prefix_cache") is False


def test_keys_of_the_other_family_and_model_args_pass(data_dir: Path) -> None:
    from lm_eval_robust.tasks.generation.tasks import GenConfig
    from lm_eval_robust.tasks.ni import NIConfig

    md = {"n_train": 5, "max_doc_words": 10, "pretrained": "x", "dtype": "float32", "version": 1}
    assert NIConfig.from_metadata({**md, "config_source": "y"}).n_perturbations == 200
    assert GenConfig.from_metadata({"format_pool": 20, "n_shots": 1}).n_shots == 1


def test_whole_rounds_are_kept_and_a_cut_round_is_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from lm_eval_robust.stats import classification as m
    from lm_eval_robust.values.complete import complete_items

    whole = _items(7, {1: 7})
    assert len(complete_items(whole)) == 14
    assert m.delta_drop(whole) == pytest.approx(-1.0)  # every perturbed prediction is wrong
    cut = _items(7, {1: 7, 2: 3})  # --limit 17: round 2 on 3 of 7 examples
    with caplog.at_level("WARNING"):
        kept = complete_items(cut)
    assert len(kept) == 14 and {int(i["pert_id"]) for i in kept} == {0, 1}
    assert m.delta_drop(cut) == pytest.approx(-1.0)
    assert any("3 docs of incomplete examples left out" in r.message for r in caplog.records)


def test_fit_on_another_split_on_purpose(w: Path) -> None:
    out = w / "c.safetensors"
    argv = ["fit", "--task", TASK, "--features", str(w / "feats_test" / TASK), "--lam", "1"]
    assert cli_main([*argv, "--any-split", "-o", str(out)]) == 0
    assert out.is_file()


def test_a_fitted_correction_is_far_inside_the_scale_bound(
    w: Path, tiny_fp: dict[str, Any]
) -> None:
    """The bound refuses nonsense, not real fits: a correction fitted on the tiny model loads."""
    from lm_eval_robust.base.validate import correction_scale
    from lm_eval_robust.scoring.correction import load

    corr = load(w / "corr.safetensors")
    rows = np.random.default_rng(0).normal(size=(2, int(tiny_fp["hidden_size"])))
    shift, scale = correction_scale(corr, rows)
    assert shift == 0.0 and scale > 0
    argv = ["fit", "--task", TASK, "--features", str(w / "feats" / f"{TASK}_train"), "--lam", "1"]
    assert cli_main([*argv, "-o", str(w / "fit.safetensors")]) == 0
    fitted = load(w / "fit.safetensors")
    shift, scale = correction_scale(fitted, rows[:, :8])
    assert 0 < shift < 1000 * scale
