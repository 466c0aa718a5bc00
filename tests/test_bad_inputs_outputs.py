# ruff: noqa: E501, F811
"""Bad inputs, continued: outputs that would touch their own inputs, files that are cut or of the
wrong shape, numeric options out of range, and settings refused before a model loads.

Each row runs through :func:`test_bad_inputs_table.check_case`: the one-line message, and the
hash of every file under the row's folder ``w`` (the inputs, and every neighbour of the output)
unchanged, nothing added or left behind. The folder is the one of ``test_bad_inputs_table``: a
tiny model, a correction, feature shards and a synthetic logged run ``run/tiny``.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_bad_inputs import STAMP, TASK
from test_bad_inputs_table import Case, check_case, tiny_fp, w  # noqa: F401 (the fixtures)
from test_label_scores import _requests

from lm_eval_robust.cli import main as cli_main

RUN_TASK = "ni065_format_pert"
FAST = ["--resamples", "100"]
QUIET = ["--resamples", "100", "--no_plots", "--quiet"]


def _results(w: Path) -> Path:
    return w / "run" / "tiny" / f"results_{STAMP}.json"


def _samples(w: Path) -> Path:
    return w / "run" / "tiny" / f"samples_{RUN_TASK}_{STAMP}.jsonl"


def _gzip_samples(w: Path, cut: int | None = None, plain: bool = False) -> None:
    """The run's samples as ``.jsonl.gz`` (cut after ``cut`` bytes, or plain JSON inside)."""
    src = _samples(w)
    data = src.read_bytes()
    packed = data if plain else gzip.compress(data, mtime=0)
    dst = src.with_name(src.name + ".gz")
    dst.write_bytes(packed[:cut] if cut else packed)
    src.unlink()


def _fifo_instead(path: Path) -> None:
    """A FIFO with no writer where a file is read (reading it would hang)."""
    import os

    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _second_results(w: Path) -> None:
    """A rerun into the same --output_path: a second results file beside the first."""
    shutil.copy(_results(w), _results(w).with_name("results_2025-02-02T00-00-00.000001.json"))


def _correction_folder(w: Path) -> None:
    (w / "cdir").mkdir()
    shutil.copy(w / "rcorr.safetensors", w / "cdir" / "rcorr.safetensors")


def _replay(w: Path, out: Path, correction: Path | None = None) -> list[str]:
    corr = str(correction or w / "rcorr.safetensors")
    return [
        "replay",
        str(w / "run"),
        "--features",
        str(w / "rfeats"),
        "--correction",
        corr,
        "-o",
        str(out),
    ]


def _layer_fit(w: Path, *extra: str) -> list[str]:
    return [
        "fit",
        "--task",
        "nq_open_text_pert",
        "--layer",
        "0",
        "--pretrained",
        str(w / "model"),
        "--select",
        "generation",
        *extra,
        "-o",
        str(w / "layer.safetensors"),
    ]


def _fit(w: Path, *extra: str) -> list[str]:
    return [
        "fit",
        "--task",
        TASK,
        "--features",
        str(w / "feats" / f"{TASK}_train"),
        "--lam",
        "1",
        *extra,
    ]


def _lm(w: Path, **kw: Any) -> Any:
    from lm_eval_robust.scoring.model import DebiasedHFLM

    return DebiasedHFLM(
        pretrained=str(w / "model"), batch_size=4, dtype="float32", device="cpu", **kw
    )


def _cached(lm: Any) -> Any:
    """The model behind lm-eval's --use_cache (the cache file outside the row's folder)."""
    import tempfile

    from lm_eval.api.model import CachingLM

    return CachingLM(lm, str(Path(tempfile.mkdtemp()) / "lm.db"))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


LB = "lm-eval-robust leaderboard: error: "
REP = "lm-eval-robust report: error: "

CASES: list[Case] = [
    # --- an output that is, holds or sits inside an input --------------------------------------
    Case(
        "select-o-is-the-results-file",
        (r"-o .*results_.*\.json is inside the run .*run/tiny", r"choose another -o outside it"),
        argv=lambda w: ["select", str(w / "run"), *FAST, "-o", str(_results(w))],
    ),
    Case(
        "select-o-is-a-samples-gz",
        (r"-o .*samples_.*\.jsonl\.gz is inside the run", r"choose another -o"),
        argv=lambda w: ["select", str(w / "run"), *FAST, "-o", str(_samples(w)) + ".gz"],
        setup=lambda w, fp, mp: _gzip_samples(w),
    ),
    Case(
        "select-o-in-the-run-folder",
        (r"is inside the run", r"outside it"),
        argv=lambda w: [
            "select",
            str(w / "run" / "tiny"),
            *FAST,
            "-o",
            str(w / "run" / "tiny" / "t.json"),
        ],
    ),
    Case(
        "plan-o-inside-the-run",
        (r"-o .*plan.md is inside the run", r"choose another -o"),
        argv=lambda w: ["plan", str(w / "run"), *FAST, "-o", str(w / "run" / "tiny" / "plan.md")],
    ),
    Case(
        "plan-o-is-the-results-file",
        (r"is inside the run", r"choose another -o"),
        argv=lambda w: ["plan", str(_results(w)), *FAST, "-o", str(_results(w))],
    ),
    Case(
        "replay-o-is-the-correction-folder",
        (r"-o .*cdir/tiny is inside the correction .*cdir", r"choose another -o"),
        argv=lambda w: _replay(w, w / "cdir", w / "cdir"),
        setup=lambda w, fp, mp: _correction_folder(w),
    ),
    Case(
        "replay-o-inside-the-features",
        (r"is inside the features", r"choose another -o"),
        argv=lambda w: _replay(w, w / "rfeats"),
    ),
    Case(
        "replay-o-inside-the-base-run",
        (r"is inside the base run", r"choose another -o"),
        argv=lambda w: _replay(w, w / "run" / "tiny"),
    ),
    Case(
        "leaderboard-o-is-the-run-folder",
        (r"-o .*run/tiny is the run .*run/tiny", r"choose another -o"),
        argv=lambda w: ["leaderboard", str(w / "run"), *QUIET, "-o", str(w / "run" / "tiny")],
        prefix=LB,
    ),
    Case(
        "leaderboard-o-holds-the-run",
        (r"holds the run", r"choose another -o"),
        argv=lambda w: ["leaderboard", str(w / "run"), *QUIET, "-o", str(w / "run")],
        prefix=LB,
    ),
    Case(
        "report-o-inside-the-run-folder",
        (r"is inside the run", r"choose another -o"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "run" / "tiny" / "rep")],
        prefix=REP,
    ),
    Case(
        "report-o-holds-the-run",
        (r"-o .* holds the run", r"choose another -o"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w)],
        prefix=REP,
    ),
    Case(
        "report-o-is-the-targets-file",
        (r"is the targets file", r"choose another -o"),
        argv=lambda w: [
            "report",
            str(w / "run"),
            *QUIET,
            "--tasks",
            str(w / "t.json"),
            "-o",
            str(w / "t.json"),
        ],
        setup=lambda w, fp, mp: _write(w / "t.json", json.dumps({"targets": [RUN_TASK]})),
        prefix=REP,
    ),
    Case(
        "report-o-holds-other-files",
        (r"-o .*notes holds readme.txt, not written by report", r"choose a new or empty -o"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "notes")],
        setup=lambda w, fp, mp: _write(w / "notes" / "readme.txt", "mine"),
        prefix=REP,
    ),
    Case(
        "leaderboard-o-holds-other-files",
        (r"holds a.csv, b.txt, c.txt and 1 more, not written by leaderboard", r"new or empty -o"),
        argv=lambda w: ["leaderboard", str(w / "run"), *QUIET, "-o", str(w / "notes")],
        setup=lambda w, fp, mp: (
            [_write(w / "notes" / n, "x") for n in ("a.csv", "b.txt", "c.txt", "d")] and None
        ),
        prefix=LB,
    ),
    Case(
        "report-o-is-a-file",
        (r"-o .*corr.safetensors is a file, not a folder", r"choose another -o"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "corr.safetensors")],
        prefix=REP,
    ),
    Case(
        "select-o-ends-in-md",
        (r"-o .*t.md ends in .md", r"targets.json"),
        argv=lambda w: ["select", str(w / "run"), *FAST, "-o", str(w / "t.md")],
    ),
    Case(
        "select-o-is-a-folder",
        (r"-o .*feats is a folder", r"give a file name"),
        argv=lambda w: ["select", str(w / "run"), *FAST, "-o", str(w / "feats")],
    ),
    Case(
        "export-o-inside-the-model-folder",
        (r"-o .*model/exported is inside the model folder", r"choose another -o"),
        argv=lambda w: [
            "export",
            "--pretrained",
            str(w / "model"),
            "--correction",
            str(w / "corr.safetensors"),
            "-o",
            str(w / "model" / "exported"),
        ],
    ),
    Case(
        "fit-o-inside-the-model-folder",
        (r"-o .*model/c.safetensors is inside the model folder", r"choose another -o"),
        argv=lambda w: [
            *_fit(w, "--pretrained", str(w / "model")),
            "-o",
            str(w / "model" / "c.safetensors"),
        ],
    ),
    Case(
        "fit-o-inside-the-features",
        (r"is inside the features", r"choose another -o"),
        argv=lambda w: [*_fit(w), "-o", str(w / "feats" / f"{TASK}_train" / "c.safetensors")],
    ),
    Case(
        "fit-features-dir-inside-the-model",
        (r"--features_dir .*model/f is inside the model folder", r"choose another --features_dir"),
        argv=lambda w: [
            "fit",
            "--task",
            TASK,
            "--pretrained",
            str(w / "model"),
            "--features_dir",
            str(w / "model" / "f"),
            "-o",
            str(w / "c.safetensors"),
        ],
    ),
    Case(
        "layer-fit-o-inside-the-model",
        (r"is inside the model folder", r"choose another -o"),
        argv=lambda w: [*_layer_fit(w)[:-1], str(w / "model" / "L.safetensors")],
    ),
    Case(
        "export-o-holds-other-files",
        (r"-o .*notes holds readme.txt, not an earlier export", r"choose a new or empty -o"),
        argv=lambda w: [
            "export",
            "--pretrained",
            str(w / "model"),
            "--correction",
            str(w / "corr.safetensors"),
            "-o",
            str(w / "notes"),
        ],
        setup=lambda w, fp, mp: _write(w / "notes" / "readme.txt", "mine"),
    ),
    Case(
        "lora-o-inside-the-model",
        (r"-o .*model/adapters is inside the model folder", r"choose another -o"),
        argv=lambda w: [
            "lora",
            "--task",
            RUN_TASK,
            "--pretrained",
            str(w / "model"),
            "-o",
            str(w / "model" / "adapters"),
        ],
    ),
    Case(
        "lora-o-is-the-correction-of-model-args",
        (r"-o .*cdir is the correction .*cdir", r"choose another -o"),
        argv=lambda w: [
            "lora",
            "--task",
            RUN_TASK,
            "--pretrained",
            str(w / "model"),
            "--model_args",
            f"correction={w / 'cdir'}",
            "-o",
            str(w / "cdir"),
        ],
        setup=lambda w, fp, mp: _correction_folder(w),
    ),
    # --- files a command reads: several, cut, of the wrong shape -------------------------------
    Case(
        "report-two-results-files",
        (
            r"run/tiny holds 2 results files \(results_2025-01-01.*json, results_2025-02-02.*json\)",
            r"give one of them as RUN",
        ),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "rep")],
        setup=lambda w, fp, mp: _second_results(w),
        prefix=REP,
    ),
    Case(
        "leaderboard-two-results-files",
        (r"holds 2 results files", r"move the others to a folder of their own"),
        argv=lambda w: ["leaderboard", str(w / "run"), *QUIET, "-o", str(w / "lb")],
        setup=lambda w, fp, mp: _second_results(w),
        prefix=LB,
    ),
    Case(
        "select-two-results-files",
        (r"holds 2 results files", r"give one of them"),
        argv=lambda w: ["select", str(w / "run"), *FAST],
        setup=lambda w, fp, mp: _second_results(w),
    ),
    Case(
        "replay-two-results-files",
        (r"holds 2 results files", r"give one of them"),
        argv=lambda w: _replay(w, w / "replayed"),
        setup=lambda w, fp, mp: _second_results(w),
    ),
    Case(
        "report-truncated-samples-gz",
        (r"samples_ni065.*\.jsonl\.gz: cut short after line \d+", r"copy the file again or rerun"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "rep")],
        setup=lambda w, fp, mp: _gzip_samples(w, cut=400),
        prefix=REP,
    ),
    Case(
        "leaderboard-samples-gz-holds-plain-json",
        (r"\.jsonl\.gz: unreadable \(Not a gzipped file", r"rerun the task with --log_samples"),
        argv=lambda w: ["leaderboard", str(w / "run"), *QUIET, "-o", str(w / "lb")],
        setup=lambda w, fp, mp: _gzip_samples(w, plain=True),
        prefix=LB,
    ),
    Case(
        "leaderboard-results-json-is-a-list",
        (r"results_.*\.json: list, not an lm_eval results file", r"give the results_\*\.json"),
        argv=lambda w: ["leaderboard", str(w / "run"), *QUIET, "-o", str(w / "lb")],
        setup=lambda w, fp, mp: _write(_results(w), "[1, 2]"),
        prefix=LB,
    ),
    Case(
        "report-results-json-without-results",
        (r"a JSON object without a 'results' object", r"lm_eval --output_path wrote"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "rep")],
        setup=lambda w, fp, mp: _write(_results(w), '{"config": {}}'),
        prefix=REP,
    ),
    Case(
        "report-configs-is-a-list",
        (r"'configs' is a list, not an object", r"rerun the task"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "rep")],
        setup=lambda w, fp, mp: _write(_results(w), '{"results": {}, "configs": []}'),
        prefix=REP,
    ),
    Case(
        "report-task-config-is-a-list",
        (r"the config of ni065_format_pert is a list, not an object", r"rerun the task"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "rep")],
        setup=lambda w, fp, mp: _write(
            _results(w), '{"results": {}, "configs": {"ni065_format_pert": []}}'
        ),
        prefix=REP,
    ),
    Case(
        "plan-task-metadata-is-a-string",
        (r"the 'metadata' of ni065_format_pert's config is a str, not an object", r"rerun"),
        argv=lambda w: ["plan", str(w / "run")],
        setup=lambda w, fp, mp: _write(
            _results(w),
            '{"results": {}, "configs": {"ni065_format_pert": {"metadata": "crossed"}}}',
        ),
    ),
    Case(
        "report-samples-line-is-a-list",
        (r"samples_.*\.jsonl:1: a JSON list, not a sample object", r"--log_samples"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "rep")],
        setup=lambda w, fp, mp: _write(_samples(w), "[1, 2]\n"),
        prefix=REP,
    ),
    Case(
        "replay-results-json-is-a-string",
        (r"results_.*\.json: str, not an lm_eval results file", r"results_\*\.json"),
        argv=lambda w: _replay(w, w / "replayed"),
        setup=lambda w, fp, mp: _write(_results(w), '"hello"'),
    ),
    Case(
        "report-results-file-is-a-fifo",
        (r"results file .*results_.*\.json is not a regular file \(a FIFO", r"lm_eval wrote"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", str(w / "rep")],
        setup=lambda w, fp, mp: _fifo_instead(_results(w)),
        prefix=REP,
    ),
    Case(
        "leaderboard-samples-file-is-a-fifo",
        (r"samples file .*samples_.*\.jsonl is not a regular file \(a FIFO", r"--log_samples"),
        argv=lambda w: ["leaderboard", str(w / "run"), *QUIET, "-o", str(w / "lb")],
        setup=lambda w, fp, mp: _fifo_instead(_samples(w)),
        prefix=LB,
    ),
    Case(
        "report-targets-file-is-a-fifo",
        (r"targets file .*t.json is not a regular file \(a FIFO", r"select -o"),
        argv=lambda w: [
            "report",
            str(w / "run"),
            *QUIET,
            "--tasks",
            str(w / "t.json"),
            "-o",
            str(w / "rep"),
        ],
        setup=lambda w, fp, mp: _fifo_instead(w / "t.json"),
        prefix=REP,
    ),
    Case(
        "report-same-run-twice",
        (r"run/tiny and .*run are the same run \(results_.*\.json\)", r"give each run once"),
        argv=lambda w: [
            "report",
            str(w / "run"),
            str(w / "run" / "tiny"),
            *QUIET,
            "-o",
            str(w / "rep"),
        ],
        prefix=REP,
    ),
    Case(
        "leaderboard-same-run-twice",
        (r"are the same run", r"give each run once"),
        argv=lambda w: [
            "leaderboard",
            str(w / "run"),
            str(_results(w)),
            "--labels",
            "a,b",
            *QUIET,
            "-o",
            str(w / "lb"),
        ],
        prefix=LB,
    ),
    Case(
        "leaderboard-label-with-a-pipe",
        (r"--labels name 'a\|b' is empty or holds \|", r"use letters, digits"),
        argv=lambda w: [
            "leaderboard",
            str(w / "run"),
            "--labels",
            "a|b",
            *QUIET,
            "-o",
            str(w / "lb"),
        ],
        prefix=LB,
    ),
    Case(
        "report-empty-label",
        (r"--labels name '' is empty", r"use letters"),
        argv=lambda w: ["report", str(w / "run"), "--labels", " ", *QUIET, "-o", str(w / "rep")],
        prefix=REP,
    ),
    # --- numeric options: one range, checked before any work, in every command -----------------
    *(
        Case(
            f"select-resamples-{n}",
            (rf"--resamples must be between 100 and 100,000; got {n}", r"10000 is the paper's"),
            argv=lambda w, n=n: ["select", str(w / "run"), "--resamples", n],
        )
        for n in ("1", "0", "-1", "1000000000")
    ),
    Case(
        "plan-resamples-1e9",
        (r"--resamples must be between 100 and 100,000; got 1000000000", r"paper"),
        argv=lambda w: ["plan", str(w / "run"), "--resamples", "1000000000"],
    ),
    Case(
        "report-resamples-1e9",
        (r"--resamples must be between 100 and 100,000", r"paper"),
        argv=lambda w: [
            "report",
            str(w / "run"),
            "--resamples",
            "1000000000",
            "-o",
            str(w / "rep"),
        ],
        prefix=REP,
    ),
    Case(
        "leaderboard-resamples-1e9",
        (r"--resamples must be between 100 and 100,000", r"paper"),
        argv=lambda w: [
            "leaderboard",
            str(w / "run"),
            "--resamples",
            "1000000000",
            "-o",
            str(w / "lb"),
        ],
        prefix=LB,
    ),
    Case(
        "report-confidence-1",
        (r"--confidence must be between 0.5 and 0.999; got 1.0", r"e.g. 0.95"),
        argv=lambda w: ["report", str(w / "run"), "--confidence", "1", "-o", str(w / "rep")],
        prefix=REP,
    ),
    Case(
        "leaderboard-confidence-nan",
        (r"--confidence must be between 0.5 and 0.999; got nan", r"0.95"),
        argv=lambda w: ["leaderboard", str(w / "run"), "--confidence", "nan", "-o", str(w / "lb")],
        prefix=LB,
    ),
    Case(
        "leaderboard-seed-negative",
        (r"--seed must be between 0 and 4294967295; got -1", r"seed"),
        argv=lambda w: ["leaderboard", str(w / "run"), "--seed", "-1", "-o", str(w / "lb")],
        prefix=LB,
    ),
    Case(
        "plan-seed-negative",
        (r"--seed must be between 0 and 4294967295", r"got -5"),
        argv=lambda w: ["plan", str(w / "run"), "--seed", "-5"],
    ),
    Case(
        "plan-k-1e9",
        (r"--k values must be between 1 and 100,000; got 1000000000", r"--k"),
        argv=lambda w: ["plan", str(w / "run"), "--k", "20,1000000000"],
    ),
    Case(
        "plan-effect-nan",
        (r"--effect must be positive and at most 100 points of BAC; got nan", r"points"),
        argv=lambda w: ["plan", str(w / "run"), "--effect", "nan"],
    ),
    Case(
        "select-min-drop-nan",
        (r"--min_clean_bac and --min_drop must be fractions in \[0, 1\]", r"got 0.7 and nan"),
        argv=lambda w: ["select", str(w / "run"), "--min_drop", "nan"],
    ),
    Case(
        "select-min-clean-bac-70",
        (r"must be fractions in \[0, 1\] \(0.7, 0.01\)", r"got 70.0"),
        argv=lambda w: ["select", str(w / "run"), "--min_clean_bac", "70"],
    ),
    Case(
        "run-tasks-typo",
        (r"unknown task\(s\) in --tasks: ni065_format_prt", r"did you mean 'ni065_format_pert'"),
        argv=lambda w: [
            "run",
            "--model",
            "debiased_hf",
            "--model_args",
            f"pretrained={w / 'model'}",
            "--tasks",
            "ni065_format_prt",
            "--output_path",
            str(w / "out"),
        ],
    ),
    # --- inside the model: the cache, feature collection, the input window --------------------
    Case(
        "use-cache-with-collect-features",
        (r"collect_features= cannot be combined with --use_cache", r"drop --use_cache"),
        call=lambda w, fp: _cached(_lm(w, collect_features=str(w / "f"))),
    ),
    Case(
        "collect-features-inside-the-model",
        (
            r"collect_features= .*model/f is inside the model folder",
            r"choose another collect_features=",
        ),
        call=lambda w, fp: _lm(w, collect_features=str(w / "model" / "f")),
    ),
    Case(
        "collect-features-is-the-correction",
        (r"collect_features= .*corr.safetensors is the correction", r"outside it"),
        call=lambda w, fp: _lm(
            w, correction=str(w / "corr.safetensors"), collect_features=str(w / "corr.safetensors")
        ),
    ),
    Case(
        "collect-features-under-a-file",
        (
            r"cannot write features to .*corr.safetensors/f \(.*corr.safetensors is not a folder\)",
            r"writable",
        ),
        call=lambda w, fp: _lm(w, collect_features=str(w / "corr.safetensors" / "f")),
    ),
    Case(
        "max-length-cuts-every-prompt",
        (
            r"requests longer than max_length=16 tokens would be scored cut short \(ni322_format_pert: 6 of 6, longest \d+\)",
            r"raise max_length",
        ),
        call=lambda w, fp: _lm(w, max_length=16).loglikelihood(_requests([TASK], limit=3)),
    ),
    Case(
        "fit-auto-seed-negative",
        (r"--seed must be between 0 and 4294967295; got -1", r"--seed"),
        argv=lambda w: [
            *_fit(w, "--method", "auto", "--seed", "-1"),
            "-o",
            str(w / "c.safetensors"),
        ],
    ),
    Case(
        "lora-epochs-1e9",
        (r"epochs must be between 1 and 1000, got 1000000000", r"1000"),
        argv=lambda w: [
            "lora",
            "--task",
            RUN_TASK,
            "--pretrained",
            str(w / "model"),
            "--epochs",
            "1000000000",
            "-o",
            str(w / "adapters"),
        ],
    ),
    Case(
        "report-o-empty-is-the-current-folder",
        (r"-o '' holds .*, not written by report", r"choose a new or empty -o"),
        argv=lambda w: ["report", str(w / "run"), *QUIET, "-o", ""],
        prefix=REP,
    ),
    # --- generation selection: refused before the model loads ---------------------------------
    Case(
        "layer-fit-max-gen-toks-negative",
        (r"--gen_kwargs max_gen_toks must be an integer between 1 and 4096; got -1", r"4096"),
        argv=lambda w: _layer_fit(w, "--gen_kwargs", "max_gen_toks=-1"),
    ),
    Case(
        "layer-fit-gen-kwargs-no-value",
        (r"--gen_kwargs must be k=v pairs as for lm_eval, got 'notakey'", r"max_gen_toks=16"),
        argv=lambda w: _layer_fit(w, "--gen_kwargs", "notakey"),
    ),
    Case(
        "layer-fit-gen-kwargs-misspelt",
        (r"--gen_kwargs: unknown setting 'max_gen_tok'", r"did you mean 'max_gen_toks'"),
        argv=lambda w: _layer_fit(w, "--gen_kwargs", "max_gen_tok=8"),
    ),
    Case(
        "layer-fit-temperature-negative",
        (r"--gen_kwargs temperature must be a number >= 0; got -1", r">= 0"),
        argv=lambda w: _layer_fit(w, "--gen_kwargs", "temperature=-1"),
    ),
    Case(
        "layer-fit-lam-grid-inf",
        (r"--lam_grid must be a comma list of positive numbers, got '1,inf'", r"1e-4,1e-2,1"),
        argv=lambda w: _layer_fit(w, "--lam_grid", "1,inf"),
    ),
    Case(
        "layer-fit-k-grid-huge",
        (r"--k_grid values must be between 1 and 1024; got 100000", r"1024"),
        argv=lambda w: _layer_fit(w, "--k_grid", "1,100000"),
    ),
    Case(
        "layer-fit-lam-grid-too-long",
        (r"--lam_grid holds 20 values; at most 16", r"generations per fold"),
        argv=lambda w: _layer_fit(w, "--lam_grid", ",".join(str(i + 1) for i in range(20))),
    ),
    Case(
        "layer-fit-gen-folds-1000",
        (r"--gen_folds must be between 2 and 20, got 1000", r"--gen_folds 3"),
        argv=lambda w: _layer_fit(w, "--gen_folds", "1000"),
    ),
    Case(
        "layer-fit-seed-negative",
        (r"--seed must be between 0 and", r"got -3"),
        argv=lambda w: _layer_fit(w, "--seed", "-3"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(
    case: Case,
    w: Path,
    tiny_fp: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    check_case(case, w, tiny_fp, monkeypatch, capsys)


def test_the_tables_are_large_enough() -> None:
    from test_bad_inputs_table import CASES as FIRST

    assert len(CASES) >= 75
    ids = [c.id for c in [*FIRST, *CASES]]
    assert len(set(ids)) == len(ids)


# ---------------------------------------------------------------------------------------------
# the good inputs beside the bad ones


@pytest.mark.parametrize("command", ["report", "leaderboard"])
def test_an_existing_output_folder_is_replaced_whole(
    w: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second run with --no_plots leaves no PNG of the first beside its new tables."""
    out = w / "run" / "out"  # beside the model folder run/tiny, not inside it: allowed
    argv = [command, str(w / "run"), "--resamples", "100", "--quiet", "-o", str(out)]
    assert cli_main(argv) == 0
    first = sorted(p.name for p in out.iterdir())
    assert any(n.endswith(".png") for n in first)
    (out / "stale.png").write_bytes(b"an old model's plot")
    before = {p: p.read_bytes() for p in (w / "run" / "tiny").iterdir()}
    assert cli_main([*argv, "--no_plots"]) == 0
    now = sorted(p.name for p in out.iterdir())
    assert now == [n for n in first if not n.endswith(".png")]
    assert {p: p.read_bytes() for p in (w / "run" / "tiny").iterdir()} == before
    assert not [p for p in (w / "run").iterdir() if p.name.startswith(".")]


def test_select_and_plan_write_whole_files_beside_the_run(w: Path) -> None:
    before = {p: p.read_bytes() for p in (w / "run" / "tiny").iterdir()}
    assert cli_main(["select", str(w / "run"), *FAST, "-o", str(w / "sel" / "t.json")]) == 0
    assert json.loads((w / "sel" / "t.json").read_text())["criteria"]["min_clean_bac"] == 0.7
    assert (w / "sel" / "t.md").read_text().startswith("# Target-task selection")
    assert cli_main(["plan", str(w / "run"), *FAST, "-o", str(w / "plan.md")]) == 0
    assert (w / "plan.md").is_file()
    assert {p: p.read_bytes() for p in (w / "run" / "tiny").iterdir()} == before
    assert sorted(p.name for p in (w / "sel").iterdir()) == ["t.json", "t.md"]


def test_ctrl_c_is_one_line(
    w: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while a report is being built: one line, exit 130, nothing written."""
    from test_bad_inputs_table import snapshot

    def interrupted(*a: Any, **k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("lm_eval_robust.cli.report.build_report", interrupted)
    before = snapshot(w)
    capsys.readouterr()
    assert cli_main(["report", str(w / "run"), *QUIET, "-o", str(w / "rep")]) == 130
    err = capsys.readouterr().err
    assert err == (
        "lm-eval-robust: interrupted (Ctrl-C); outputs appear whole or not at all: rerun to "
        "finish\n"
    )
    assert snapshot(w) == before
