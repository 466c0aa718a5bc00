"""`pip install .` and `pip install -e .` both give plain lm-eval our model, tasks and metrics.

Each case builds a scratch venv that sees every package of the test environment except this
project (its site-packages entries are linked one by one, ours left out), installs a copy of the
checkout into it with ``pip install --no-deps --no-build-isolation --no-index [-e]`` (nothing is
downloaded), and asks the scratch interpreter, started normally so that its ``.pth`` files run,
what lm-eval sees. Opt-in (marker ``install``, about a minute): ``.ci/run`` runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = "lm_eval_robust"  # every installed file of ours has this in its normalised name
SKIPPED_TOP_LEVEL = {"results", "build", "dist", "runs", "out"}

pytestmark = pytest.mark.install

PROBE = r"""
import importlib.metadata as md
import importlib.util
import json
from pathlib import Path

import lm_eval_robust
import _lm_eval_robust_hook
from lm_eval.tasks import TaskManager

names = set(TaskManager().all_tasks)

import lm_eval.models
from lm_eval.api.registry import get_metric, get_model, is_higher_better
from lm_eval.api.registry import metric_registry, model_registry

def task_dir(value):
    spec = importlib.util.find_spec(value.split(":")[0])
    return str(Path(spec.submodule_search_locations[0]).resolve())

eps = md.entry_points()
print(json.dumps({
    "package": str(Path(lm_eval_robust.__file__).resolve()),
    "hook": str(Path(_lm_eval_robust_hook.__file__).resolve()),
    "ours": sorted(names & {"ni065_format_pert", "ni_text_pert", "robust_nq_open_text_pert"}),
    "builtin": "arc_easy" in names,
    "model_registered": "debiased_hf" in model_registry,
    "model": get_model("debiased_hf").__name__,
    # the hook leaves lm-eval's metric registry alone; register() adds ours
    "metric_before_register": "robust_bac_clean" in metric_registry,
    "metric": (lm_eval_robust.register(), get_metric("robust_bac_clean").__module__)[1],
    "higher_is_better": [is_higher_better(f"robust_{m}") for m in ("bac_clean", "tie_share")],
    "task_entry_points": [task_dir(ep.value) for ep in eps.select(group="lm_eval.tasks")],
}))
"""


def _site_packages(prefix: Path) -> Path:
    paths = sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})
    return Path(paths["purelib"])


def _scratch_venv(root: Path) -> Path:
    """A venv whose site-packages links every entry of ours except this project's own."""
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    target = _site_packages(env_dir)
    parents = {
        Path(p) for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
    }
    for parent in sorted(parents):
        for entry in parent.iterdir():
            name = entry.name.lower().replace("-", "_")
            if OURS in name or entry.name == "__pycache__" or (target / entry.name).exists():
                continue
            (target / entry.name).symlink_to(entry)
    return env_dir


def _copy_checkout(dest: Path) -> Path:
    """The checkout without run artefacts, venvs or build output (pip builds in the tree)."""
    dest.mkdir()
    for entry in REPO.iterdir():
        if (
            entry.name.startswith(".")
            or entry.name in SKIPPED_TOP_LEVEL
            or entry.name.endswith(".egg-info")
            or (entry / "pyvenv.cfg").exists()
        ):
            continue
        if entry.is_dir():
            shutil.copytree(entry, dest / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(entry, dest / entry.name)
    return dest


def _run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run away from the checkout: ``python -c`` would import the package from the cwd."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    full_env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **env)
    return subprocess.run(
        cmd, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=600, check=False
    )


@pytest.mark.parametrize("editable", [False, True], ids=["wheel", "editable"])
def test_install_gives_plain_lm_eval_our_model_and_tasks(
    editable: bool, tmp_path: Path, data_dir: Path
) -> None:
    env_dir = _scratch_venv(tmp_path)
    python = env_dir / "bin" / "python"
    source = _copy_checkout(tmp_path / "src")
    mode = ["-e"] if editable else []
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    install = _run([*pip, *mode, str(source)], cwd=tmp_path)
    assert install.returncode == 0, install.stdout + install.stderr

    site = _site_packages(env_dir)
    assert (site / "lm_eval_robust_hook.pth").is_file()
    assert (env_dir / "bin" / "lm-eval-robust").is_file()

    # -I: no cwd or user site on sys.path; site-packages and its .pth files as usual.
    probe = _run([str(python), "-I", "-c", PROBE], cwd=tmp_path, HF_HUB_OFFLINE="1")
    assert probe.returncode == 0, probe.stderr[-3000:]
    seen: dict[str, Any] = json.loads(probe.stdout.strip().splitlines()[-1])

    home = source if editable else site
    assert Path(seen["package"]).is_relative_to(home.resolve()), seen["package"]
    assert Path(seen["hook"]).is_relative_to(home.resolve()), seen["hook"]
    assert seen["ours"] == ["ni065_format_pert", "ni_text_pert", "robust_nq_open_text_pert"]
    assert seen["builtin"] is True
    assert seen["model_registered"] is True
    assert seen["model"] == "DebiasedHFLM"
    assert seen["metric_before_register"] is False
    assert seen["metric"] == "lm_eval_robust.harness.harness_metrics"
    assert seen["higher_is_better"] == [True, False]
    # The `lm_eval.tasks` entry point resolves, as upstream's proposal does it, to our YAMLs.
    (yamls,) = seen["task_entry_points"]
    assert (Path(yamls) / "_ni_yaml").is_file()
    assert Path(yamls).is_relative_to(home.resolve())

    # Uninstalling leaves nothing behind that changes another program: no .pth, no hook module,
    # no package, and a fresh interpreter's lm-eval sees none of our names.
    before = {p.name for p in site.iterdir()}
    uninstall = _run([str(python), "-m", "pip", "uninstall", "-y", "lm-eval-robust"], cwd=tmp_path)
    assert uninstall.returncode == 0, uninstall.stdout + uninstall.stderr
    left = {p.name for p in site.iterdir()}
    ours = {n for n in left if "lm_eval_robust" in n or "lm-eval-robust" in n.replace("_", "-")}
    assert not ours, sorted(ours)
    assert left <= before
    after = _run(
        [
            str(python),
            "-I",
            "-c",
            "import sys; from lm_eval.tasks import TaskManager; "
            "print('ni065_format_pert' in TaskManager().all_tasks, "
            "any(m.startswith('lm_eval_robust') or m == '_lm_eval_robust_hook' "
            "for m in sys.modules))",
        ],
        cwd=tmp_path,
        HF_HUB_OFFLINE="1",
    )
    assert after.returncode == 0, after.stderr[-3000:]
    assert after.stdout.split()[-2:] == ["False", "False"]
