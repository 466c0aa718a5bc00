"""Data parallel on CPU: two processes give the metrics and the correction of one process.

Launched as ``ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 -m lm_eval ...`` (on GPUs:
``accelerate launch --multi_gpu --num_processes N -m lm_eval ...``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

MD = '{"n_perturbations": 3, "n_examples": 40}'


def _run(cmd: list[str], env: dict[str, str]) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]


def _results(out_dir: Path) -> dict:
    files = list(out_dir.rglob("results_*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())["results"]["ni322_format_pert_train"]


@pytest.mark.slow
def test_two_processes_equal_one(tiny_model_dir: Path, data_dir: Path, tmp_path: Path) -> None:
    from lm_eval_robust.stats.fit.run import FitSettings, fit_features
    from lm_eval_robust.values.features import load_features

    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    args = [
        "-m",
        "lm_eval",
        "--model",
        "debiased_hf",
        "--tasks",
        "ni322_format_pert_train",
        "--metadata",
        MD,
        "--batch_size",
        "4",
    ]

    def model_args(name: str) -> list[str]:
        ma = f"pretrained={tiny_model_dir},dtype=float32,collect_features={tmp_path / name}"
        return ["--model_args", ma, "--output_path", str(tmp_path / f"{name}_out")]

    _run([sys.executable, *args, *model_args("one")], env)
    torchrun = str(Path(sys.executable).parent / "torchrun")
    _run([torchrun, "--nproc_per_node", "2", *args, *model_args("two")], env)

    assert sorted(p.name for p in (tmp_path / "two" / "ni322_format_pert_train").iterdir()) == [
        "rank0.safetensors",
        "rank1.safetensors",
    ]
    one, two = _results(tmp_path / "one_out"), _results(tmp_path / "two_out")
    for key in (
        "robust_bac_clean,none",
        "robust_bac_pert,none",
        "robust_delta_drop,none",
        "robust_auc_pert,none",
    ):
        assert one[key] == pytest.approx(two[key], abs=1e-9)
    fa = load_features(tmp_path / "one" / "ni322_format_pert_train")
    fb = load_features(tmp_path / "two" / "ni322_format_pert_train")
    assert (fa.example_id == fb.example_id).all() and (fa.pert_id == fb.pert_id).all()
    np.testing.assert_allclose(fa.x, fb.x, atol=1e-5)  # batches differ: float noise only
    ca, cb = fit_features(fa, FitSettings(lam=1.0)), fit_features(fb, FitSettings(lam=1.0))
    np.testing.assert_allclose(ca.W, cb.W, atol=1e-6)
    np.testing.assert_allclose(ca.beta, cb.beta, atol=1e-6)
