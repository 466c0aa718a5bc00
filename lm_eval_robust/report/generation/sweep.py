"""Paired confidence intervals for a generation layer sweep (the paper's Table 4).

``python -m lm_eval_robust.report.generation.sweep DIR [-o OUT] [--resamples N]`` reads the samples
of ``DIR/runs/<label>...`` (harness output folders made with ``--log_samples``; ``<label>`` is
``base`` for no correction or ``L<layer>[-<variant>...]`` such as ``L14-k4``, optionally followed
by ``_<group>``)
and pairs every debiased run with the base run example by example. Per task it reports, each with
a 95 % BCa interval from a bootstrap clustered by example (an example's clean prompt and all its
perturbations are drawn together, and the base and debiased runs draw the same examples):

* base: clean score, perturbed score and ``δ_drop`` = perturbed − clean (negative is a drop);
* per layer: its clean and perturbed scores, ``δ_drop`` with the correction, ``δ_clean`` =
  clean_L − clean_base, ``gain`` = pert_L − pert_base and ``p_recover`` = 100 gain / (clean_base
  − pert_base) (undefined when the base run has no drop, its perturbed score at or above the
  clean one; resamples without a drop are left out, and no interval is given when more than 1 %
  of them are);
* ``mde``: the smallest true effect the comparison detects with 80 % power at the two-sided 5 %
  level, 2.80 × its standard error (the standard deviation of the per-example differences over
  the square root of the number of examples); an effect below it is not distinguishable from
  noise at this size;
* ``p``: the exact paired test of each difference (exact McNemar on the examples whose
  outcome changed where every per-example score is 0 or 100, e.g. EM with one perturbation per
  example; else a sign-flip permutation test of the per-example differences). A difference is
  called distinguishable from zero only where this p is below 0.05; a BCa endpoint beside 0 is
  not a test at a handful of changed examples;
* ``generations changed``: how many of the base run's generations (clean and perturbed prompts)
  the correction changed at all, whether or not the score moved.

Scores are the task's primary metric in percent (EM for NQ-open, TriviaQA and GSM8K, F1 for
XSum), averaged first over an example's perturbations, then over examples. Writes ``sweep.md``,
``sweep.csv``, ``sweep.json`` and ``sweep.png`` to ``OUT`` (default ``DIR``).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from lm_eval_robust.base.defaults import DEFAULT_RESAMPLES
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.base.harness_names import harness, short_task
from lm_eval_robust.report.generation.table import LABEL as _LABEL
from lm_eval_robust.report.generation.table import PRIMARY
from lm_eval_robust.stats.bootstrap import cluster_bootstrap_ci, linear_stat
from lm_eval_robust.stats.paired_tests import exact_paired

__all__ = [
    "Cell",
    "RunSamples",
    "SweepRow",
    "main",
    "paired_rows",
    "read_run",
    "read_samples",
    "render",
]

_SAMPLES = re.compile(r"^samples_(.+)_\d{4}-\d\d-\d\dT[\d\-.]+\.jsonl(?:\.gz)?$")
Z_POWER = 1.959964 + 0.841621  # two-sided 5 % test, 80 % power


class SweepError(UserError):
    """A sweep folder that cannot be paired; the message names the run and the fix."""


@dataclass(frozen=True)
class Cell:
    """An estimate in percent (points), its 95 % BCa interval and, for differences, the MDE."""

    value: float
    low: float
    high: float
    mde: float = math.nan
    p: float = math.nan  # exact paired test (differences only)

    def text(self) -> str:
        if not math.isfinite(self.value):
            return "n/a"
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{self.value:.1f}"
        return f"{self.value:.1f} [{self.low:.1f}, {self.high:.1f}]"


@dataclass(frozen=True)
class SweepRow:
    """One task and run label: the figures of the module docstring."""

    task: str
    label: str
    n_examples: int
    clean: Cell
    pert: Cell
    drop: Cell
    delta_clean: Cell | None = None
    gain: Cell | None = None
    p_recover: Cell | None = None
    changed: tuple[int, int] = (0, 0)  # generations that differ from the base run's, of how many


@dataclass(frozen=True)
class RunSamples:
    """One run's samples of one task, read in one pass.

    ``scores``: ``example_id -> (clean score, sum of perturbed scores, number of perturbations)``;
    ``texts``: ``(example_id, pert_id) -> generated text``.
    """

    scores: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    texts: dict[tuple[str, int], str] = field(default_factory=dict)


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Numbered JSON records of a samples file; a one-line error for a corrupt or cut file."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if line.strip():
                    yield n, json.loads(line)
    except json.JSONDecodeError as exc:
        raise SweepError(f"{path}:{n}: not valid JSON ({exc.msg}); rerun that label") from None
    except (OSError, EOFError) as exc:
        raise SweepError(f"{path}: cannot be read ({exc}); rerun that label") from None


def read_run(run: Path, task: str, score: str) -> RunSamples:
    """The samples of ``task`` under one run folder (empty when it holds none).

    ``task`` is the name without the namespace (``gsm8k_text_pert``): runs written under the
    current name (``robust_gsm8k_text_pert``) and under the old one are read alike.
    """
    files = sorted(
        f
        for f in run.rglob("samples_*.jsonl*")
        if (m := _SAMPLES.match(f.name)) and short_task(m[1]) == short_task(task)
    )
    if not files:
        return RunSamples()
    if len(files) > 1:
        raise SweepError(f"{run}: {len(files)} sample files of {task}; keep one run per folder")
    clean: dict[str, float] = {}
    pert_sum: dict[str, float] = {}
    pert_n: dict[str, int] = {}
    texts: dict[tuple[str, int], str] = {}
    for _, rec in _lines(files[0]):
        item = rec.get(harness(f"{score}_clean"), rec.get(f"{score}_clean"))  # new, old name
        if not isinstance(item, dict) or score not in item.get("scores", {}):
            raise SweepError(f"{files[0]}: no {score!r} score per doc; rerun with --log_samples")
        ex, pid, v = str(item["example_id"]), int(item["pert_id"]), float(item["scores"][score])
        if pid == 0:
            clean[ex] = v
        else:
            pert_sum[ex] = pert_sum.get(ex, 0.0) + v
            pert_n[ex] = pert_n.get(ex, 0) + 1
        resp = rec.get("filtered_resps") or rec.get("resps") or [""]
        texts[(ex, pid)] = str(resp[0][0] if isinstance(resp[0], list) else resp[0])
    scores = {ex: (c, pert_sum.get(ex, 0.0), pert_n.get(ex, 0)) for ex, c in clean.items()}
    return RunSamples(scores, texts)


def read_samples(run: Path, task: str, score: str) -> dict[str, tuple[float, float, int]]:
    """``example_id -> (clean score, sum of perturbed scores, number of perturbations)``."""
    return read_run(run, task, score).scores


def _load(dirs: Sequence[Path], task: str, score: str) -> RunSamples:
    """A label's runs of ``task`` merged (a label may span several output folders)."""
    merged = RunSamples()
    for d in dirs:
        one = read_run(d, task, score)
        merged.scores.update(one.scores)
        merged.texts.update(one.texts)
    return merged


def _changed(base: RunSamples, other: RunSamples) -> tuple[int, int]:
    """How many of the base run's generations the other run changed, of how many."""
    common = base.texts.keys() & other.texts.keys()
    return sum(base.texts[k] != other.texts[k] for k in common), len(common)


def _labels(directory: Path) -> dict[str, list[Path]]:
    runs = directory / "runs"
    if not runs.is_dir():
        raise SweepError(f"{directory}: no runs/ folder; pass the sweep folder (DIR/runs/<label>)")
    out: dict[str, list[Path]] = {}
    for d in sorted(p for p in runs.iterdir() if p.is_dir()):
        m = _LABEL.match(d.name)
        if m:
            out.setdefault(m[1], []).append(d)
    if "base" not in out:
        raise SweepError(f"{runs}: no base run (runs/base...); run the model without a correction")
    return out


def _matrix(
    base: dict[str, tuple[float, float, int]], other: dict[str, tuple[float, float, int]] | None
) -> tuple[np.ndarray, list[str]]:
    """Per example ``[c0, p0, c1, p1]`` in percent (perturbed: mean over the perturbations)."""
    ids = sorted(base)
    if other is not None and set(other) != set(base):
        raise SweepError(
            f"the runs hold different examples ({len(base)} vs {len(other)}); "
            "run every label with the same --metadata"
        )
    rows = []
    for ex in ids:
        c0, s0, n0 = base[ex]
        c1, s1, n1 = other[ex] if other is not None else base[ex]
        if n0 == 0 or n1 == 0:
            raise SweepError(f"example {ex} has no perturbed prompt; run the _text_pert task")
        rows.append([100 * c0, 100 * s0 / n0, 100 * c1, 100 * s1 / n1])
    return np.asarray(rows, dtype=np.float64), ids


def _stats(m: np.ndarray) -> np.ndarray:
    """``m [b, 5]`` weighted sums of ``[c0, p0, c1, p1, 1]`` -> the eight figures."""
    c0, p0, c1, p1 = (m[:, i] / m[:, 4] for i in range(4))
    with np.errstate(divide="ignore", invalid="ignore"):
        # defined only where the base run drops (clean above perturbed): with no drop, or a
        # perturbed score above the clean one, there is nothing to recover
        rec = np.where(c0 - p0 > 1e-9, 100 * (p1 - p0) / (c0 - p0), np.nan)
    return np.stack([c0, p0, p0 - c0, c1, p1, p1 - c1, c1 - c0, p1 - p0, rec], axis=1)


def _mde(diff: np.ndarray) -> float:
    """NaN when the differences do not vary (no example changed: no spread to scale by)."""
    n = diff.shape[0]
    sd = float(np.std(diff, ddof=1)) if n > 1 else 0.0
    return Z_POWER * sd / math.sqrt(n) if sd > 0 else math.nan


def _p(before: np.ndarray, after: np.ndarray) -> float:
    return exact_paired(before, after).p


def paired_rows(
    directory: Path, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> list[SweepRow]:
    """Every task and label of the sweep folder, paired with the base run (see the docstring)."""
    labels = _labels(directory)
    rows: list[SweepRow] = []
    for task, score in PRIMARY.items():
        base_run = _load(labels["base"], task, score)
        base = base_run.scores
        if not base:
            continue
        others = sorted((k for k in labels if k != "base"), key=_label_key)
        for label in ["base", *others]:
            other_run = None if label == "base" else _load(labels[label], task, score)
            other = None if other_run is None else other_run.scores
            if other is not None and not other:
                continue
            try:
                m, _ = _matrix(base, other)
            except SweepError as err:
                raise SweepError(f"{task}, {label} vs base: {err}") from None
            suff = np.hstack([m, np.ones((m.shape[0], 1))])
            ci = cluster_bootstrap_ci(
                linear_stat(suff, _stats), m.shape[0], n_resamples=n_resamples, seed=seed
            )
            cell = [Cell(*ci.row(i)) for i in range(9)]
            mde_drop = _mde(m[:, 1] - m[:, 0])
            drop = Cell(cell[2].value, cell[2].low, cell[2].high, mde_drop, _p(m[:, 0], m[:, 1]))
            if label == "base":
                rows.append(SweepRow(task, label, m.shape[0], cell[0], cell[1], drop))
                continue
            rows.append(
                SweepRow(
                    task,
                    label,
                    m.shape[0],
                    cell[3],
                    cell[4],
                    Cell(
                        cell[5].value,
                        cell[5].low,
                        cell[5].high,
                        _mde(m[:, 3] - m[:, 2]),
                        _p(m[:, 2], m[:, 3]),
                    ),
                    Cell(
                        cell[6].value,
                        cell[6].low,
                        cell[6].high,
                        _mde(m[:, 2] - m[:, 0]),
                        _p(m[:, 0], m[:, 2]),
                    ),
                    Cell(
                        cell[7].value,
                        cell[7].low,
                        cell[7].high,
                        _mde(m[:, 3] - m[:, 1]),
                        _p(m[:, 1], m[:, 3]),
                    ),
                    cell[8],
                    _changed(base_run, other_run) if other_run is not None else (0, 0),
                )
            )
    if not rows:
        raise SweepError(f"{directory}/runs: no samples of {', '.join(PRIMARY)}; use --log_samples")
    return rows


def _label_key(label: str) -> tuple[int, str]:
    num = re.match(r"L(\d+)", label)
    return (int(num[1]) if num else -1, label)


def _mde_text(c: Cell | None) -> str:
    return f"{c.mde:.1f}" if c is not None and math.isfinite(c.mde) else "–"


def _p_text(c: Cell | None) -> str:
    if c is None or not math.isfinite(c.p):
        return "–"
    return "< 0.001" if c.p < 0.001 else f"{c.p:.3f}"


def render(rows: Sequence[SweepRow]) -> str:
    """Markdown: one table per task."""
    out: list[str] = []
    for task in dict.fromkeys(r.task for r in rows):
        metric = PRIMARY[task].upper()
        sub = [r for r in rows if r.task == task]
        out += [
            f"### {task.removesuffix('_text_pert')} ({metric}, %, n = {sub[0].n_examples} "
            "examples, 95 % clustered BCa)",
            "",
            "| run | clean | perturbed | δ_drop | δ_clean vs base | gain vs base (pert) "
            "| p_recover | MDE δ_drop / δ_clean / gain | exact p δ_drop / δ_clean / gain "
            "| generations changed |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sub:
            cells = [r.clean.text(), r.pert.text(), r.drop.text()]
            if r.label == "base":
                cells += [
                    "–",
                    "–",
                    "–",
                    f"{_mde_text(r.drop)} / – / –",
                    f"{_p_text(r.drop)} / – / –",
                    "–",
                ]
            else:
                assert r.delta_clean is not None and r.gain is not None and r.p_recover
                cells += [
                    r.delta_clean.text(),
                    r.gain.text(),
                    r.p_recover.text(),
                    f"{_mde_text(r.drop)} / {_mde_text(r.delta_clean)} / {_mde_text(r.gain)}",
                    f"{_p_text(r.drop)} / {_p_text(r.delta_clean)} / {_p_text(r.gain)}",
                    f"{r.changed[0]}/{r.changed[1]}",
                ]
            out.append(f"| {r.label} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _flat(rows: Sequence[SweepRow]) -> list[dict[str, object]]:
    flat: list[dict[str, object]] = []
    for r in rows:
        d: dict[str, object] = {"task": r.task, "label": r.label, "n_examples": r.n_examples}
        d["changed"], d["generations"] = r.changed
        for name in ("clean", "pert", "drop", "delta_clean", "gain", "p_recover"):
            c = getattr(r, name)
            for part in ("value", "low", "high", "mde", "p"):
                d[f"{name}_{part}"] = getattr(c, part) if c is not None else math.nan
        flat.append(d)
    return flat


def plot(rows: Sequence[SweepRow], path: Path | BinaryIO) -> None:
    """Per task with a layer run: δ_clean and the perturbed gain of every layer, with intervals."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tasks = list(dict.fromkeys(r.task for r in rows if r.label != "base"))
    if not tasks:  # base runs only: nothing to compare
        return
    fig = Figure(figsize=(5.2 * len(tasks), 3.6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks, strict=True):
        sub = [r for r in rows if r.task == task and r.label != "base"]
        base = next(r for r in rows if r.task == task and r.label == "base")
        x = np.arange(len(sub))
        for j, (name, label, colour) in enumerate(
            (("gain", "perturbed gain", "#1f77b4"), ("delta_clean", "δ_clean", "#d62728"))
        ):
            cells = [getattr(r, name) for r in sub]
            v = np.array([c.value for c in cells])
            lo = np.array([c.low if math.isfinite(c.low) else c.value for c in cells])
            hi = np.array([c.high if math.isfinite(c.high) else c.value for c in cells])
            ax.errorbar(
                x + (j - 0.5) * 0.2,
                v,
                yerr=np.vstack([v - lo, hi - v]),
                fmt="o",
                capsize=3,
                color=colour,
                label=label,
            )
        ax.axhline(0.0, color="grey", lw=0.8)
        if base.drop.value < 0:  # the gain that would close the base run's drop
            ax.axhline(-base.drop.value, color="#2ca02c", lw=0.8, ls="--", label="full recovery")
        ax.set_xticks(x, [r.label for r in sub])
        ax.set_title(
            f"{task.removesuffix('_text_pert')}: base {base.clean.value:.1f} → "
            f"{base.pert.value:.1f} {PRIMARY[task].upper()}",
            fontsize=9,
        )
        ax.set_ylabel("points vs base (95 % BCa)")
        ax.legend(fontsize=7)
    fig.savefig(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lm_eval_robust.report.generation.sweep", description=__doc__.split("\n")[0]
    )
    parser.add_argument("directory", type=Path, help="sweep folder holding runs/<label>/")
    parser.add_argument("-o", "--out", type=Path, help="where to write (default: DIRECTORY)")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        return _write(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _write(args: argparse.Namespace) -> int:
    """Read the sweep's runs and write its tables and plot, each file whole, none inside a run."""
    import io

    from lm_eval_robust.base.atomic import refuse_overwrite, run_inputs, write_file, write_text
    from lm_eval_robust.base.validate import check_resamples, check_seed

    check_resamples(args.resamples)
    check_seed(args.seed)
    out = args.out or args.directory
    runs = sorted(p for p in (args.directory / "runs").glob("*") if p.is_dir())
    names = ("sweep.md", "sweep.csv", "sweep.json", "sweep.png")
    for name in names:
        refuse_overwrite(out / name, "-o", run_inputs(runs))
    rows = paired_rows(args.directory, n_resamples=args.resamples, seed=args.seed)
    text = render(rows)
    flat = _flat(rows)
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(flat[0]))
    writer.writeheader()
    writer.writerows(flat)
    write_text(text, out / "sweep.md", "the sweep table")
    write_text(table.getvalue(), out / "sweep.csv", "the sweep table")
    body = json.dumps([asdict(r) for r in rows], indent=1, allow_nan=True)
    write_text(body, out / "sweep.json", "the sweep table")
    png = io.BytesIO()
    plot(rows, png)
    if not png.getvalue():  # no task with layer runs: no plot, and none of an earlier sweep
        (out / "sweep.png").unlink(missing_ok=True)
    else:
        write_file(png.getvalue(), out / "sweep.png", "the sweep plot")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
