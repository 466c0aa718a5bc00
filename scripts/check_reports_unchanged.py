"""Recompute the committed reports and tables under results/ and check they come out byte-identical.

Every ``report.json`` under results/ was written by ``lm-eval-robust report``; it records its runs
(results files and labels) and its settings (resamples, confidence, seed, certificate rules), so
the command is rebuilt from it and run again into a temporary folder, and every committed file of
the report folder (Markdown, CSV, JSON, PNG) is compared byte for byte with the new one. The other
committed tables are the outputs of the commands their folder's ``run.sh`` (or README) gives,
listed in :func:`all_checks`: ``plan``, ``select``, ``leaderboard``, the generation sweep and the
folders' own table scripts. A command that writes into its own folder is run there and compared
with ``git diff`` (the committed file is restored afterwards, whatever the outcome).

    python scripts/check_reports_unchanged.py                # everything
    python scripts/check_reports_unchanged.py --list         # what would run
    python scripts/check_reports_unchanged.py --only ni220_all/report --only plan
    git worktree add --detach /tmp/before BASE_COMMIT
    python scripts/check_reports_unchanged.py --before /tmp/before     # and against BASE's code
    python scripts/check_reports_unchanged.py --update       # rewrite what differs

Each line says IDENTICAL, DIFFERENT (naming the files) or FAILED (the command's last error line),
with the seconds it took. Reports committed by an older version of the package differ from a
recomputation for reasons older than any one change; ``--before`` separates those: each command
also runs in the other checkout (its code, scripts and results), and the line says whether this
checkout's output is byte-identical to that one's. The exit status is 0 when every check is
identical to the committed files or, with ``--before``, to the other checkout's output. No model
is loaded: every input is a committed run folder, correction file or feature shard.

``--update`` makes the committed files what the current code writes, for a deliberate change of
output (a new report section, a corrected statistic): each DIFFERENT check's outputs are written
over the committed files (atomically), and a ``report`` check runs its command again into the
committed report folder itself, which ``report`` replaces whole, so the folder holds exactly what
it writes now (a file it no longer writes is gone; ``git status`` shows it). The line then says
UPDATED. A check whose command failed, or that no longer writes a committed file, is left as it
is and says so. Only small generated tables and figures are ever written: a target (or new
content) over 1 MB, a results or samples file of a run, a correction or a feature shard is refused
with a one-line reason, and a report folder holding any of them is not rerun. Review ``git diff``
before committing: an update is right only where every difference has a known cause.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
CLI = [sys.executable, "-m", "lm_eval_robust.cli"]

#: the largest file ``--update`` writes or replaces (generated tables and figures are far smaller)
MAX_UPDATE_BYTES = 1_000_000
#: what ``--update`` never writes: a run's results and samples, corrections, feature shards
PROTECTED = ("results_*.json", "samples_*", "*.safetensors", "*.jsonl", "*.jsonl.gz", "*.pt")

#: the certificate estimator names of ``report --certificate`` by (eps_rule, density_rule)
ESTIMATORS = {("zero", "uniform"): "paper", ("order", "histogram"): "distribution_free"}


@dataclass
class Check:
    """One command and the committed files it must reproduce.

    ``outputs`` maps a path the command writes (relative to the temporary folder ``{out}`` when it
    starts with ``{out}/``, else to ``cwd``) to the committed file it must equal; ``stdout``
    names a committed file the command's standard output must equal; ``folder``, for a
    ``report`` check, the committed report folder (``--update`` reruns the command into it)."""

    name: str
    cwd: Path
    argv: list[str]
    outputs: dict[str, Path] = field(default_factory=dict)
    stdout: Path | None = None
    folder: Path | None = None


def _report_check(report_json: Path) -> Check:
    """The ``report`` command a committed report folder records, writing into ``{out}``."""
    doc = json.loads(report_json.read_text(encoding="utf-8"))
    folder = report_json.parent
    first = doc["runs"][0]["results"]
    cwd = next(
        (d for d in [folder.parent, *folder.parent.parents] if (d / first).exists()), folder.parent
    )
    s, cert = doc["settings"], doc["settings"]["cert"]
    rules = (cert["eps_rule"], cert["density_rule"])
    argv = [*CLI, "report", *[r["results"] for r in doc["runs"]]]
    argv += ["--labels", ",".join(r["label"] for r in doc["runs"]), "-o", "{out}/report"]
    argv += ["--resamples", str(s["n_resamples"]), "--confidence", str(s["confidence"])]
    argv += ["--seed", str(s["seed"]), "--phi", str(cert["phi"]), "--psi", str(cert["psi"])]
    if rules in ESTIMATORS:
        argv += ["--certificate", ESTIMATORS[rules]]
    else:
        argv += ["--eps_rule", rules[0], "--density_rule", rules[1]]
    argv += ["--chebyshev", cert["chebyshev"], "--quiet"]
    tasks = sorted({t["task"] for t in doc["tasks"]})
    if tasks:
        argv += ["--tasks", ",".join(tasks)]
    committed = sorted(p for p in folder.iterdir() if p.is_file())
    if not any(p.suffix == ".png" for p in committed):
        argv.append("--no_plots")
    outputs = {f"{{out}}/report/{p.name}": p for p in committed}
    return Check(str(folder.relative_to(RESULTS)), cwd, argv, outputs, folder=folder)


def _leaderboard_check(folder: str, runs: list[str]) -> Check:
    """``leaderboard RUNS -o leaderboard`` run in ``results/FOLDER``, every file it wrote."""
    root = RESULTS / folder
    files = sorted(p for p in (root / "leaderboard").iterdir() if p.is_file())
    return Check(
        f"{folder}/leaderboard",
        root,
        [*CLI, "leaderboard", *runs, "-o", "{out}/lb", "--quiet"],
        {f"{{out}}/lb/{p.name}": p for p in files},
    )


def _plan_checks() -> list[Check]:
    """``plan base_run -o plan_drop.md`` and ``plan base_run run_ridge -o plan_debias.md``
    (results/protocol.sh) in each protocol folder that holds them."""
    out = []
    for drop in sorted(RESULTS.glob("*/plan_drop.md")):
        d = drop.parent
        out.append(
            Check(
                f"{d.name}/plan_drop.md",
                d,
                [*CLI, "plan", "base_run", "-o", "{out}/p.md"],
                {"{out}/p.md": drop},
            )
        )
        if (d / "plan_debias.md").exists():
            argv = [*CLI, "plan", "base_run", "run_ridge", "-o", "{out}/p.md"]
            out.append(
                Check(f"{d.name}/plan_debias.md", d, argv, {"{out}/p.md": d / "plan_debias.md"})
            )
    return out


def _select_checks() -> list[Check]:
    """``select RUN -o targets.json`` over the committed screening runs (their run.sh)."""
    out = []
    q = RESULTS / "qwen2.5-coder-1.5b_select"
    for style in ("plain", "chat"):
        argv = [*CLI, "select", f"{style}_run", "-o", f"{{out}}/targets_{style}.json"]
        outputs = {f"{{out}}/targets_{style}.json": q / f"targets_{style}.json"}
        if (q / f"targets_{style}.md").exists():
            outputs[f"{{out}}/targets_{style}.md"] = q / f"targets_{style}.md"
        out.append(Check(f"{q.name}/targets_{style}", q, argv, outputs, q / f"select_{style}.md"))
    g = RESULTS / "gemma-3-270m_select"
    argv = [*CLI, "select", "select_run", "-o", "{out}/targets.json"]
    outputs = {"{out}/targets.json": g / "targets.json", "{out}/targets.md": g / "targets.md"}
    out.append(Check(f"{g.name}/targets", g, argv, outputs))
    return out


def _table_checks() -> list[Check]:
    """The folders' own table commands (their run.sh or README)."""
    lb = RESULTS / "leaderboard"
    lb_runs = ["smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-0.5b-instruct"]
    lb_runs.append("qwen2.5-coder-1.5b-instruct")
    lb_argv = [*CLI, "leaderboard", *[f"runs/{r}" for r in lb_runs], "--labels"]
    lb_argv += ["SmolLM2 135M,Gemma 3 270M,Qwen2.5-Coder 0.5B,Qwen2.5-Coder 1.5B"]
    lb_argv += ["-o", "{out}/table", "--quiet"]
    # the page's screenshot is Chromium's (run.sh), not the command's
    lb_files = sorted(
        p for p in (lb / "table").iterdir() if p.is_file() and p.name != "leaderboard_page.png"
    )
    # the wrapped BIG-bench tasks' leaderboards (results/wrap_bigbench/README.md)
    wrap = []
    for task in ("navigate", "sports_understanding"):
        w = RESULTS / "wrap_bigbench" / task
        argv = [*CLI, "leaderboard", *[f"runs/{r}" for r in lb_runs], "-o", "{out}/lb", "--quiet"]
        files = sorted(p for p in (w / "leaderboard").iterdir() if p.is_file())
        wrap.append(
            Check(
                f"wrap_bigbench/{task}/leaderboard",
                w,
                argv,
                {f"{{out}}/lb/{p.name}": p for p in files},
            )
        )
    # all fifteen wrapped BIG-bench tasks: the pilot (results/wrap_bigbench_all15/run.sh) and the
    # leaderboard at the size plan chose (results/wrap_bigbench_n40/run.sh); runs in folders of
    # their own where the per-folder budget asks
    pilot = ["runs/smollm2-135m-instruct", "runs/gemma-3-270m"]
    pilot += [f"../wrap_bigbench_all15_qwen/runs/{r}" for r in lb_runs[2:]]
    wrap.append(_leaderboard_check("wrap_bigbench_all15", pilot))
    n40 = ["runs/smollm2-135m-instruct", "../wrap_bigbench_n40_gemma/runs/gemma-3-270m"]
    n40 += [
        f"../wrap_bigbench_n40_qwen{size}/runs/qwen2.5-coder-{size}-instruct"
        for size in ("0.5b", "1.5b")
    ]
    wrap.append(_leaderboard_check("wrap_bigbench_n40", n40))
    gen = RESULTS / "qwen2.5-coder-1.5b_generation"
    auto = RESULTS / "qwen2.5-coder-1.5b_auto_fit"
    gsel = RESULTS / "gemma-3-270m_gen_select"
    deb = RESULTS / "gemma-3-270m_debias"
    return [
        Check("leaderboard/table", lb, lb_argv, {f"{{out}}/table/{p.name}": p for p in lb_files}),
        Check(
            f"{gen.name}/sweep",
            ROOT,
            [sys.executable, "-m", "lm_eval_robust.report.generation.sweep", str(gen)],
            {str(gen / n): gen / n for n in ("sweep.md", "sweep.csv", "sweep.json", "sweep.png")},
        ),
        Check(
            f"{gen.name}/fit_summary",
            gen,
            [sys.executable, "fit_summary.py"],
            {"fit_summary.md": gen / "fit_summary.md"},
        ),
        Check(
            f"{auto.name}/compare",
            auto,
            [sys.executable, "compare.py"],
            {"compare.json": auto / "compare.json"},
            auto / "compare.md",
        ),
        Check(
            f"{gsel.name}/compare",
            ROOT,
            [sys.executable, str(gsel / "compare.py"), str(gsel)],
            {},
            gsel / "compare.md",
        ),
        Check(
            f"{deb.name}/table",
            ROOT,
            [sys.executable, str(deb / "make_table.py")],
            {},
            deb / "table.md",
        ),
        *wrap,
    ]


def all_checks() -> list[Check]:
    reports = [_report_check(p) for p in sorted(RESULTS.rglob("report.json"))]
    return reports + _plan_checks() + _select_checks() + _table_checks()


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def _moved(check: Check, root: Path) -> Check:
    """The same check in another checkout of the repository (its code, scripts and results)."""
    if root == ROOT:
        return check

    def move(text: str) -> str:
        return text.replace(str(ROOT), str(root))

    return Check(
        check.name,
        Path(move(str(check.cwd))),
        [a if a == sys.executable else move(a) for a in check.argv],
        {move(k): Path(move(str(v))) for k, v in check.outputs.items()},
        None if check.stdout is None else Path(move(str(check.stdout))),
        None if check.folder is None else Path(move(str(check.folder))),
    )


def produce(check: Check, root: Path = ROOT) -> dict[str, bytes | None] | str:
    """The bytes the check's command writes, keyed by the committed file's name relative to
    results/ (None: not written), or the error that stopped it. ``root``: a checkout whose code
    (imported through PYTHONPATH), scripts and results are used instead of this one's."""
    c = _moved(check, root)
    in_place = [Path(k) for k in c.outputs if not k.startswith("{out}/")]
    in_place = [p if p.is_absolute() else c.cwd / p for p in in_place]
    dirty = [p for p in in_place if _git(root, "diff", "--quiet", "--", str(p)).returncode]
    if dirty:
        return f"uncommitted changes in {', '.join(map(str, dirty))}"
    env = dict(os.environ, MPLBACKEND="Agg")
    if root != ROOT:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    out: dict[str, bytes | None] = {}
    with tempfile.TemporaryDirectory(prefix="reports_unchanged_") as tmp:
        argv = [a.replace("{out}", tmp) for a in c.argv]
        try:
            proc = subprocess.run(argv, cwd=c.cwd, env=env, capture_output=True)
            if proc.returncode != 0:
                lines = proc.stderr.decode(errors="replace").strip().splitlines() or ["?"]
                return f"exit {proc.returncode}: {lines[-1]}"
            if check.stdout is not None:
                out[_key(check.stdout)] = proc.stdout
            for made, committed in zip(c.outputs, check.outputs.values(), strict=True):
                path = Path(made.replace("{out}", tmp))
                path = path if path.is_absolute() else c.cwd / path
                out[_key(committed)] = path.read_bytes() if path.is_file() else None
        finally:
            if in_place:
                _git(root, "checkout", "--", *map(str, in_place))
    return out


def _key(committed: Path) -> str:
    return str(committed.relative_to(RESULTS))


def _differ(made: Mapping[str, bytes | None], want: Mapping[str, bytes | None]) -> list[str]:
    return sorted(k for k in want if made.get(k) != want[k])


def _refusal(path: Path, size: int = 0) -> str | None:
    """Why ``--update`` must not write ``path`` (``size`` bytes), or None."""
    if not path.resolve().is_relative_to(RESULTS.resolve()):
        return f"{path} is outside results/"
    if any(fnmatch.fnmatch(path.name, pat) for pat in PROTECTED) or "features" in path.parts:
        return f"{path.relative_to(RESULTS)} is a run's input (results, samples or feature file)"
    for n, what in ((path.stat().st_size if path.is_file() else 0, "is"), (size, "would be")):
        if n > MAX_UPDATE_BYTES:
            return f"{path.relative_to(RESULTS)} {what} over 1 MB ({n:,} bytes)"
    return None


def update(check: Check, made: dict[str, bytes | None]) -> str | None:
    """Make the committed files of ``check`` what its command writes now; the reason it could
    not, or None. ``made``: :func:`produce`'s output for the check."""
    from lm_eval_robust.base.atomic import write_file

    if check.folder is not None:
        for held in sorted(check.folder.iterdir()):
            why = _refusal(held) or (None if held.is_file() else f"{held.name} is a folder")
            if why:
                return f"report folder not rerun: {why}"
        too_big = [r for k, v in made.items() if v and (r := _refusal(RESULTS / k, len(v)))]
        if too_big:
            return too_big[0]
        argv = [a.replace("{out}/report", str(check.folder)) for a in check.argv]
        env = dict(os.environ, MPLBACKEND="Agg")
        proc = subprocess.run(argv, cwd=check.cwd, env=env, capture_output=True)
        if proc.returncode != 0:
            lines = proc.stderr.decode(errors="replace").strip().splitlines() or ["?"]
            return f"report rerun failed, exit {proc.returncode}: {lines[-1]}"
        return None
    missing = sorted(k for k, v in made.items() if v is None)
    if missing:
        return f"no longer written: {', '.join(missing)}; nothing updated"
    committed = {k: RESULTS / k for k in made}
    refused = [r for k, v in made.items() if v and (r := _refusal(committed[k], len(v)))]
    if refused:
        return refused[0]
    for k, data in made.items():
        if data is not None and committed[k].read_bytes() != data:
            write_file(data, committed[k], what=k)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--only", action="append", default=[], help="run checks whose name has this")
    p.add_argument("--list", action="store_true", help="list the checks and their commands")
    p.add_argument(
        "--before",
        type=Path,
        default=None,
        help="another checkout (e.g. a worktree of the base commit): run each command there "
        "too and say whether this checkout's output is the same as that one's",
    )
    p.add_argument(
        "--update",
        action="store_true",
        help="write each DIFFERENT check's new outputs over the committed files (a report "
        "check reruns into its committed folder); review git diff before committing",
    )
    args = p.parse_args(argv)
    if args.update and args.before is not None:
        p.error("--update and --before do not go together; run one, then the other")
    checks = [c for c in all_checks() if not args.only or any(o in c.name for o in args.only)]
    if args.list:
        for c in checks:
            print(f"{c.name}\n    cd {c.cwd.relative_to(ROOT)} && {' '.join(c.argv)}")
        return 0
    before = args.before.resolve() if args.before else None
    bad = changed = updated = 0
    for c in checks:
        start = time.monotonic()
        made = produce(c)
        committed = {_key(f): f.read_bytes() for f in [*c.outputs.values(), c.stdout] if f}
        if isinstance(made, str):
            verdict, detail = "FAILED", made
        else:
            files = _differ(made, committed)
            verdict = "DIFFERENT" if files else "IDENTICAL"
            detail = ", ".join(Path(f).name for f in files)
            if files and args.update:
                why = update(c, made)
                verdict = "DIFFERENT" if why else "UPDATED"
                detail += f"; not updated: {why}" if why else ""
        bad += verdict != "IDENTICAL"
        updated += verdict == "UPDATED"
        line = f"{verdict:9s} {c.name}"
        if detail:
            line += f" [{detail}]"
        if before is not None:
            old = produce(c, before)
            if isinstance(old, str) or isinstance(made, str):
                same = isinstance(old, str) and isinstance(made, str)
                line += f"; before: {old if isinstance(old, str) else 'ran'}"
            else:
                moved = _differ(made, old)
                same = not moved
                line += "; same output as before" if same else f"; CHANGED since before: {moved}"
            changed += not same
        print(f"{line} ({time.monotonic() - start:.0f} s)", flush=True)
    summary = f"{len(checks) - bad} of {len(checks)} identical to the committed files"
    if args.update:
        summary += f"; {updated} updated"
    if before is not None:
        summary += f"; {len(checks) - changed} of {len(checks)} give the same output as {before}"
    print(summary)
    return 1 if (bad - updated if before is None else changed) else 0


if __name__ == "__main__":
    sys.exit(main())
