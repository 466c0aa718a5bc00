"""lm-eval's own test suite, with and without this plugin: the same results, or the difference.

    python scripts/check_quiet_guest.py [--work DIR] [--keep] [-- PYTEST_ARGS...]

Run it from the project's venv (lm-eval, torch, pytest and the project installed; offline is
fine). It

1. fetches the sdist of the installed lm-eval release (``pip download lm_eval==X --no-binary
   :all: --no-deps``; its ``tests/`` folder is lm-eval's test suite), or reuses one in ``--work``;
2. makes two scratch venvs that link every package of this venv except the project's own
   (lm-eval, torch and every other dependency are the same files), and installs the project
   (``pip install --no-deps --no-build-isolation``) into the second one only;
3. runs ``python -P -m pytest tests`` inside the unpacked sdist in each, offline
   (``HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1``), writing a JUnit XML report per venv;
4. compares the outcome of every test and prints the counts and each test whose outcome differs.

Tests that need the network fail or skip in both venvs alike; only a difference counts. Exit
status 0 when the outcomes agree, 1 when they differ, 2 for a setup error. Extra arguments after
``--`` go to pytest (e.g. ``-- tests/test_registry.py`` for a quick look).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import venv
import xml.etree.ElementTree as ET
from collections import Counter
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OURS = "lm_eval_robust"  # the package, the hook module, its .pth, the dist-info, editable files


def _fail(msg: str) -> SystemExit:
    print(f"check_quiet_guest.py: error: {msg}", file=sys.stderr)
    return SystemExit(2)


def _site(prefix: Path) -> Path:
    return Path(sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})["purelib"])


def _scratch_venv(env_dir: Path) -> Path:
    """A venv linking every entry of this one's site-packages except the project's own."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(env_dir)
    target = _site(env_dir)
    here = {Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    for parent in sorted(here):
        for entry in parent.iterdir():
            name = entry.name.lower().replace("-", "_")
            if (
                name.startswith(OURS)
                or entry.name == "__pycache__"
                or (target / entry.name).exists()
            ):
                continue
            (target / entry.name).symlink_to(entry)
    return env_dir / "bin" / "python"


def _sdist(work: Path, release: str) -> Path:
    unpacked = work / f"lm_eval-{release}"
    if (unpacked / "tests").is_dir():
        return unpacked
    archive = work / f"lm_eval-{release}.tar.gz"
    if not archive.is_file():
        cmd = [sys.executable, "-m", "pip", "download", f"lm_eval=={release}"]
        cmd += ["--no-binary", ":all:", "--no-deps", "--no-build-isolation", "-d", str(work)]
        if subprocess.run(cmd, check=False).returncode != 0 or not archive.is_file():
            raise _fail(f"cannot fetch the lm_eval {release} sdist; put {archive.name} in {work}")
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    if not (unpacked / "tests").is_dir():
        raise _fail(f"{archive.name} holds no tests/ folder")
    return unpacked


def _outcomes(xml: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        out[name] = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
    return out


def _run_suite(python: Path, sdist: Path, xml: Path, extra: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = [str(python), "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    # a test module that cannot be imported offline errors in both venvs alike; go on past it
    cmd += ["--continue-on-collection-errors", f"--junitxml={xml}", *(extra or ["tests"])]
    subprocess.run(cmd, cwd=sdist, env=env, check=False)
    if not xml.is_file():
        raise _fail(f"pytest wrote no report ({' '.join(cmd)})")
    return _outcomes(xml)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in args:
        extra = args[args.index("--") + 1 :]
        args = args[: args.index("--")]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=None, help="folder for the sdist and venvs")
    ap.add_argument("--keep", action="store_true", help="keep the scratch venvs")
    ap.add_argument(
        "--reuse-bare",
        action="store_true",
        help="reuse --work's without.xml from an earlier run (same lm-eval) instead of rerunning",
    )
    opts = ap.parse_args(args)
    release = version("lm_eval")
    work = opts.work or Path(tempfile.mkdtemp(prefix="quiet-guest-"))
    work.mkdir(parents=True, exist_ok=True)
    sdist = _sdist(work, release)

    bare = _scratch_venv(work / "venv-bare")
    plugin = _scratch_venv(work / "venv-plugin")
    pip = [str(plugin), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    if subprocess.run([*pip, str(ROOT)], check=False, cwd=work).returncode != 0:
        raise _fail("pip could not install the project into the plugin venv")

    results = {}
    for label, python in (("without the plugin", bare), ("with the plugin", plugin)):
        xml = work / f"{label.split()[0]}.xml"
        if opts.reuse_bare and python == bare and xml.is_file():
            print(f"== lm-eval {release} test suite {label}: reusing {xml}", flush=True)
            results[label] = _outcomes(xml)
            continue
        print(f"== lm-eval {release} test suite {label}", flush=True)
        results[label] = _run_suite(python, sdist, xml, extra)
    a, b = results.values()
    print(f"\nlm-eval {release}, offline, {len(a)} tests:")
    for label, res in results.items():
        counts = Counter(res.values())
        print(f"  {label}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    differ = sorted(t for t in set(a) | set(b) if a.get(t) != b.get(t))
    for t in differ:
        print(f"  differs: {t}: {a.get(t, 'absent')} without, {b.get(t, 'absent')} with")
    print("  same outcome for every test" if not differ else f"  {len(differ)} tests differ")
    if not opts.keep:
        for d in ("venv-bare", "venv-plugin"):
            shutil.rmtree(work / d, ignore_errors=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
