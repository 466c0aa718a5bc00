"""Read lm-eval output folders and pair the docs of two runs by (task, example_id, pert_id).

``lm_eval ... --output_path OUT --log_samples`` writes ``OUT/<model_dir>/results_<ts>.json`` and
one ``OUT/<model_dir>/samples_<task>_<ts>.jsonl`` per task. A run is found from ``OUT``, from
``OUT/<model_dir>`` or from the results file itself. Only what the report needs is kept of each
sample line: the per-doc item our ``process_results`` returns (ids, gold, prediction, label
log-likelihoods), the doc's kind and split, and the doc hash.

Two runs are paired per task only if the protocol settings of the task agree (the task configs'
metadata and dataset kwargs) and the runs scored exactly the same docs (same ids, same gold,
same doc hash). Docs are matched by ids, never by position.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lm_eval_robust.base.errors import UserError

__all__ = [
    "PROTOCOL_KEYS",
    "NoResultsError",
    "NoSamplesError",
    "PairedTask",
    "ReportError",
    "Run",
    "StockValues",
    "TaskRun",
    "UnpairableError",
    "label_runs",
    "load_run",
    "pair_runs",
    "protocol_settings",
]

# Task settings that change which docs exist or what they contain (NIConfig's fields).
PROTOCOL_KEYS: tuple[str, ...] = (
    "n_examples",
    "n_perturbations",
    "n_shots",
    "seed",
    "format_pool",
    "split_fractions",
    "text_rate",
    "text_kinds",
    "text_scope",
    "design",
)
_DEFAULTS: dict[str, Any] = {
    "n_examples": 200,
    "n_perturbations": 200,
    "n_shots": 2,
    "seed": 1234,
    "format_pool": 200,
    "split_fractions": (0.5, 0.35, 0.15),
    "text_rate": 0.05,
    "text_kinds": ("zero_width", "confusable", "markup", "typo"),
    "text_scope": "all",
    "design": "nested",
}


class ReportError(UserError):
    """A report input problem; the message names the folder and the fix."""


class NoResultsError(ReportError):
    """No ``results_*.json`` where a run was expected."""


class NoSamplesError(ReportError):
    """A run without per-doc samples (``--log_samples`` was not given)."""


class UnpairableError(ReportError):
    """Two runs that did not score the same docs under the same settings."""


@dataclass(frozen=True, eq=False)
class StockValues:
    """A wrapped stock task's own per-doc metric (its samples' ``stock_<metric>_*`` values): the
    first metric lm-eval lists for the task (``acc`` before ``acc_norm``), under the first filter
    its samples name (``strict-match`` before ``flexible-extract``)."""

    metric: str
    filter: str
    listed: tuple[str, ...]  # every stock metric the task reports, in lm-eval's order
    higher_is_better: bool
    items: dict[tuple[str, int], dict[str, Any]]  # example_id, pert_id, variant, value

    @property
    def label(self) -> str:
        """The metric's name in tables: ``acc``, or ``exact_match (strict-match)``."""
        return self.metric if self.filter == "none" else f"{self.metric} ({self.filter})"

    def item_list(self) -> list[dict[str, Any]]:
        return [self.items[k] for k in sorted(self.items)]


@dataclass(frozen=True, eq=False)
class TaskRun:
    """One task of one run: per-doc items keyed by (example_id, pert_id)."""

    task: str
    kind: str
    split: str
    items: dict[tuple[str, int], dict[str, Any]]
    doc_hashes: dict[tuple[str, int], str]
    config: Mapping[str, Any]
    stock: StockValues | None = None  # a wrapped stock task's own metric

    def item_list(self) -> list[dict[str, Any]]:
        return [self.items[k] for k in sorted(self.items)]

    @property
    def design(self) -> str:
        """The design its config recorded (``crossed``, or ``nested``: the default)."""
        cfg = self.config if isinstance(self.config, Mapping) else {}
        meta = cfg.get("metadata") or {}
        return str(meta.get("design", "nested")) if isinstance(meta, Mapping) else "nested"


@dataclass(frozen=True, eq=False)
class Run:
    """One lm-eval run (one results file) and its tasks with samples."""

    path: Path
    label: str
    model: str
    results_file: Path
    tasks: dict[str, TaskRun]
    results: Mapping[str, Any] = field(repr=False)
    notes: tuple[str, ...] = ()
    # the fit summary of the correction applied to each task family (``correction_key``), when
    # the run applied one: method, λ, p_eps_V / p_eps_L on the train features
    fits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # wrapped tasks with the stock task's own metric and no label scores (generate_until), read
    # with ``load_run(..., stock_only=True)``: their items are empty, their ``stock`` set
    stock_only: dict[str, TaskRun] = field(default_factory=dict)


def _find_results(path: Path) -> Path:
    if path.is_file():
        if path.name.startswith("results_") and path.suffix == ".json":
            return path
        raise NoResultsError(f"{path}: not a results_*.json file of an lm_eval run")
    if not path.is_dir():
        raise NoResultsError(f"{path}: no such folder")
    found = sorted(path.glob("results_*.json"))
    if not found:
        found = sorted(path.glob("*/results_*.json"))
    if not found:
        raise NoResultsError(
            f"{path}: no results_*.json found; give the --output_path folder of an lm_eval run"
        )
    folders = sorted({f.parent for f in found})
    if len(folders) > 1:
        raise NoResultsError(
            f"{path}: runs of several models ({', '.join(f.name for f in folders)}); "
            "give one of these folders"
        )
    if len(found) > 1:  # a rerun into the same --output_path: reading one would drop the other
        raise NoResultsError(
            f"{folders[0]} holds {len(found)} results files ({', '.join(f.name for f in found)}); "
            "give one of them as RUN, or move the others to a folder of their own"
        )
    return found[0]


def read_results(results_file: Path) -> dict[str, Any]:
    """A results file as lm_eval writes it (a JSON object whose ``results`` is an object), or
    one line naming what is wrong with it."""
    from lm_eval_robust.base.validate import read_bytes

    data = read_bytes(
        results_file, "results file", "give the results_*.json lm_eval wrote", NoResultsError
    )
    try:
        results = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise NoResultsError(f"{results_file}: not UTF-8 text; is it a results file?") from None
    except json.JSONDecodeError as exc:
        raise NoResultsError(f"{results_file}: not valid JSON ({exc.msg})") from None
    shape = type(results).__name__
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        what = "a JSON object without a 'results' object" if isinstance(results, dict) else shape
        raise NoResultsError(
            f"{results_file}: {what}, not an lm_eval results file; give the results_*.json "
            "that lm_eval --output_path wrote"
        )
    for key in ("configs", "config"):
        if results.get(key) is not None and not isinstance(results[key], dict):
            raise NoResultsError(
                f"{results_file}: '{key}' is a {type(results[key]).__name__}, not an object; "
                "the file is not as lm_eval writes it: rerun the task"
            )
    for task, cfg in (results.get("configs") or {}).items():
        if not isinstance(cfg, dict):
            bad = f"the config of {task} is a {type(cfg).__name__}"
        else:
            keys = ("metadata", "dataset_kwargs")
            wrong = [k for k in keys if cfg.get(k) is not None and not isinstance(cfg[k], dict)]
            bad = (
                f"the '{wrong[0]}' of {task}'s config is a {type(cfg[wrong[0]]).__name__}"
                if wrong
                else ""
            )
        if bad:
            raise NoResultsError(
                f"{results_file}: {bad}, not an object; the file is not as lm_eval writes it: "
                "rerun the task"
            )
    return results


def _model_args(results: Mapping[str, Any]) -> dict[str, Any]:
    """The run's ``--model_args`` as a dict (the harness logs a string or a mapping)."""
    args = (results.get("config", {}) or {}).get("model_args", "")
    if isinstance(args, Mapping):
        return dict(args)
    return dict(p.split("=", 1) for p in str(args).split(",") if "=" in p)


def _model_name(results: Mapping[str, Any]) -> str:
    cfg = results.get("config", {}) or {}
    args = _model_args(results)
    extra = "+correction" if args.get("correction") else ""
    name = str(args.get("pretrained") or cfg.get("model_name") or cfg.get("model") or "model")
    return name.rstrip("/").split("/")[-1] + extra


def _fits(results: Mapping[str, Any], results_file: Path) -> tuple[dict[str, Any], list[str]]:
    """Fit summaries of the correction a run applied, and a note when they cannot be read.

    A replay records them in its results file. A real ``correction=PATH`` run records only the
    path, read as given (relative to the current folder) or relative to the folder ``lm_eval``
    ran in when ``--output_path`` was one folder name (``OUT/<model>/results_*.json``).
    """
    from lm_eval_robust.scoring.correction import CorrectionError, fit_summaries

    block = results.get("lm_eval_robust_replay") or {}
    if isinstance(block.get("corrections"), Mapping):
        return {str(k): dict(v) for k, v in block["corrections"].items()}, []
    path = block.get("correction") or _model_args(results).get("correction")
    if not path:
        return {}, []
    for cand in (Path(str(path)), results_file.parent.parent.parent / str(path)):
        if cand.exists():
            try:
                return fit_summaries(cand), []
            except CorrectionError as exc:
                return {}, [f"fit statistics (p_εV, p_εL) left out: {exc}"]
    return {}, [f"correction {path} not found from here: fit statistics (p_εV, p_εL) left out"]


_NOT_METRICS = frozenset({"doc", "arguments", "resps", "filtered_resps", "target"})


def _item_of(sample: Mapping[str, Any]) -> dict[str, Any] | None:
    """The per-doc value our process_results gave (the same dict under every metric key)."""
    for key, value in sample.items():
        if key in _NOT_METRICS or not isinstance(value, Mapping):
            continue
        if "example_id" in value and "pert_id" in value and "pred" in value:
            return dict(value)
    return None


STOCK_PREFIX, STOCK_CLEAN = "stock_", "_clean"


def _stock_names(sample: Mapping[str, Any]) -> list[str]:
    """The stock metrics a wrapped task's sample carries, in the order lm-eval lists them."""
    listed = sample.get("metrics")
    names = listed if isinstance(listed, list) else list(sample)
    return [
        str(n)[len(STOCK_PREFIX) : -len(STOCK_CLEAN)]
        for n in names
        if isinstance(n, str)
        and n.startswith(STOCK_PREFIX)
        and n.endswith(STOCK_CLEAN)
        and isinstance(sample.get(n), Mapping)
        and "value" in sample[n]
    ]


def _stock_of(
    lines: Sequence[tuple[str, list[str], Mapping[str, Any]]],
    keys: set[tuple[str, int]],
    higher_is_better: Mapping[str, Any],
) -> StockValues | None:
    """The first stock metric of a wrapped task's samples (``(filter, metrics, values)`` per
    line), under the first filter, for the docs ``keys`` (those of complete examples); None for
    a task that reports none."""
    if not lines:
        return None
    flt, listed, _ = lines[0]
    metric = listed[0]
    items: dict[tuple[str, int], dict[str, Any]] = {}
    for f, _, values in lines:
        v = values.get(metric)
        if f != flt or v is None:
            continue
        key = (str(v["example_id"]), int(v["pert_id"]))
        if key in keys:
            items[key] = {
                "example_id": key[0],
                "pert_id": key[1],
                "variant": str(v.get("variant", "clean")),
                "value": float(v["value"]),
            }
    if not items:
        return None
    hib = higher_is_better.get(f"{STOCK_PREFIX}{metric}{STOCK_CLEAN}", True)
    return StockValues(metric, flt, tuple(listed), bool(hib), items)


def _complete(
    items: dict[tuple[str, int], dict[str, Any]], task: str, notes: list[str]
) -> dict[tuple[str, int], dict[str, Any]]:
    """Items of complete examples only (:mod:`lm_eval_robust.values.complete`), with a note."""
    from lm_eval_robust.values.complete import complete_items

    kept = complete_items({**i, "task": task} for i in items.values())
    if len(kept) < len(items):
        notes.append(f"{task}: {len(items) - len(kept)} docs of incomplete examples left out")
    return {
        (str(i["example_id"]), int(i["pert_id"])): items[(str(i["example_id"]), int(i["pert_id"]))]
        for i in kept
    }


def _read_samples(
    file: Path,
    task: str,
    config: Mapping[str, Any],
    higher_is_better: Mapping[str, Any] | None = None,
) -> tuple[TaskRun | None, list[str]]:
    items: dict[tuple[str, int], dict[str, Any]] = {}
    hashes: dict[tuple[str, int], str] = {}
    kinds: set[str] = set()
    splits: set[str] = set()
    notes: list[str] = []
    stock_lines: list[tuple[str, list[str], Mapping[str, Any]]] = []
    for n, sample in read_sample_lines(file, ReportError):
        names = _stock_names(sample)
        if names:  # a wrapped stock task: keep its own metric's per-doc values
            values = {m: sample[f"{STOCK_PREFIX}{m}{STOCK_CLEAN}"] for m in names}
            stock_lines.append((str(sample.get("filter", "none")), names, values))
        item = _item_of(sample)
        if item is None and names:  # a wrapped generate_until task: its own metric only
            continue
        if item is None:
            return None, [f"{task}: samples carry no per-doc ids (not an lm-eval-robust task)"]
        if item.get("ll") is None:
            raise ReportError(f"{file}:{n}: the per-doc values have no 'll'; rerun the task")
        if not all(math.isfinite(float(v)) for v in item["ll"]):
            raise ReportError(
                f"{file}:{n}: non-finite label log-likelihood {item['ll']}; the run is "
                "corrupt: run it again"
            )
        key = (str(item["example_id"]), int(item["pert_id"]))
        items[key] = item
        doc = sample.get("doc") or {}
        if "variant" not in item and doc:  # runs logged before items named their variant
            fmt = doc.get("format_id") if doc.get("kind") == "format" else doc.get("pert_kind")
            item["variant"] = str(fmt)
        kinds.add(str(doc.get("kind", "")))
        splits.add(str(doc.get("split", "")))
        if sample.get("doc_hash") is not None:
            hashes[key] = str(sample["doc_hash"])
    if not items and not stock_lines:
        return None, [f"{task}: empty samples file {file.name}"]
    if items:
        items = _complete(items, task, notes)
        keys = set(items)
    else:  # the stock metric's docs, of complete examples
        everything = {
            (str(v["example_id"]), int(v["pert_id"]))
            for _, _, values in stock_lines
            for v in values.values()
        }
        kept = _complete(
            {k: {"example_id": k[0], "pert_id": k[1]} for k in everything}, task, notes
        )
        keys = set(kept)
    kwargs = config.get("dataset_kwargs") or {}
    md = config.get("metadata") or {}  # wrapped stock tasks name their kind in the metadata
    kind = "/".join(sorted(k for k in kinds if k)) or str(
        kwargs.get("lmer_kind") or md.get("lmer_kind", "")
    )
    split = "/".join(sorted(s for s in splits if s)) or str(
        kwargs.get("lmer_split") or md.get("lmer_split", "")
    )
    stock = _stock_of(stock_lines, keys, higher_is_better or {})
    return TaskRun(task, kind, split, items, hashes, config, stock), notes


def read_sample_lines(file: Path, error: type[UserError]) -> Any:
    """``(line number, sample)`` of a samples file (``.jsonl`` or ``.jsonl.gz``); a cut or
    corrupt file, or a line that is not a JSON object, is one line naming it."""
    from lm_eval_robust.base.validate import regular_file

    regular_file(file, "samples file", "rerun the task with --log_samples", error)
    opener: Any = gzip.open if file.suffix == ".gz" else open
    n = 0
    try:
        with opener(file, "rt", encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    sample = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise error(f"{file}:{n}: not valid JSON ({exc.msg})") from None
                if not isinstance(sample, dict):
                    raise error(
                        f"{file}:{n}: a JSON {type(sample).__name__}, not a sample object; "
                        "the file is not as lm_eval --log_samples writes it"
                    )
                yield n, sample
    except (EOFError, gzip.BadGzipFile, UnicodeDecodeError, OSError) as exc:
        what = "cut short" if isinstance(exc, EOFError) else f"unreadable ({exc})"
        raise error(
            f"{file}: {what} after line {n}; copy the file again or rerun the task with "
            "--log_samples"
        ) from None


def load_run(path: str | Path, label: str | None = None, stock_only: bool = False) -> Run:
    """Load a run from its output folder (or model subfolder, or results file).

    ``stock_only``: also keep the wrapped tasks whose samples carry only the stock task's own
    metric (``generate_until``: GSM8K's ``exact_match``), in :attr:`Run.stock_only`; without it
    they are left out with a note, as for any task without per-doc label scores."""
    p = Path(path)
    results_file = _find_results(p)
    results = read_results(results_file)
    stamp = results_file.stem[len("results_") :]
    folder = results_file.parent
    configs: Mapping[str, Any] = results.get("configs", {}) or {}
    task_names = sorted(set(configs) | set(results.get("results", {}) or {}))
    tasks: dict[str, TaskRun] = {}
    stock_tasks: dict[str, TaskRun] = {}
    notes: list[str] = []
    missing: list[str] = []
    for task in task_names:
        file = folder / f"samples_{task}_{stamp}.jsonl"
        if not file.exists():  # archived runs may keep their samples gzipped
            file = file.with_name(file.name + ".gz")
        if not file.exists():
            if task in configs:
                missing.append(task)
            continue
        hib = (results.get("higher_is_better") or {}).get(task) or {}
        tr, more = _read_samples(file, task, configs.get(task, {}) or {}, hib)
        if tr is not None and not tr.items:
            if stock_only and tr.stock is not None:
                stock_tasks[task] = tr
                notes += more
            else:
                notes.append(f"{task}: samples carry no per-doc ids (not an lm-eval-robust task)")
            continue
        notes += more
        if tr is not None:
            tasks[task] = tr
    if not tasks and not stock_tasks:
        if missing:
            raise NoSamplesError(
                f"{folder}: no samples_*_{stamp}.jsonl for {', '.join(missing)}; "
                "rerun lm_eval with --log_samples"
            )
        raise NoSamplesError(f"{folder}: no task with lm-eval-robust per-doc samples")
    notes += [f"{t}: no samples file (run without --log_samples?); left out" for t in missing]
    name = p.name if p.is_dir() else p.parent.name
    fits, more = _fits(results, results_file)
    notes += more
    dtype = label_score_dtype(results)
    if dtype != "float32":
        notes.append(
            f"labels scored in {dtype}: exact ties are common at that precision; this report "
            "gives them 1/k credit, while the run's own results file let the first label win "
            "(rescore it with `lm-eval-robust replay RUN --features DIR -o OUT`)"
        )
    return Run(
        path=p,
        label=label or name,
        model=_model_name(results),
        results_file=results_file,
        tasks=tasks,
        results=results,
        notes=tuple(notes),
        fits=fits,
        stock_only=stock_tasks,
    )


# --------------------------------------------------------------------------------------------
# Pairing


@dataclass(frozen=True, eq=False)
class PairedTask:
    """One task scored by two runs on the same docs."""

    task: str
    base: TaskRun
    other: TaskRun
    keys: tuple[tuple[str, int], ...]


def protocol_settings(config: Mapping[str, Any]) -> dict[str, str]:
    """A task config's protocol settings (defaults filled in), as comparable strings."""
    md = config.get("metadata") or {}
    out = {k: _norm(md.get(k, _DEFAULTS[k])) for k in PROTOCOL_KEYS}
    kwargs = config.get("dataset_kwargs") or {}
    for k in sorted(kwargs):
        out[f"dataset_kwargs.{k}"] = _norm(kwargs[k])
    return out


def _norm(value: Any) -> str:
    if isinstance(value, str) and "," in value:
        value = [v.strip() for v in value.replace("+", ",").split(",") if v.strip()]
    if isinstance(value, list | tuple):
        return json.dumps([_norm(v) for v in value])
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return str(int(number)) if number.is_integer() else str(number)
    return str(value)


def _check_task(task: str, a: TaskRun, b: TaskRun, labels: tuple[str, str]) -> PairedTask:
    pa, pb = protocol_settings(a.config), protocol_settings(b.config)
    diff = [k for k in pa if pa.get(k) != pb.get(k)] + [k for k in pb if k not in pa]
    if diff:
        k = diff[0]
        raise UnpairableError(
            f"{task}: runs {labels[0]!r} and {labels[1]!r} differ in {k} "
            f"({pa.get(k)} vs {pb.get(k)}); rerun with the same --metadata"
        )
    ka, kb = set(a.items), set(b.items)
    if ka != kb:
        raise UnpairableError(
            f"{task}: runs {labels[0]!r} and {labels[1]!r} scored different docs ({len(ka)} vs "
            f"{len(kb)}, {len(ka & kb)} in common); rerun both with the same settings and --limit"
        )
    for key in sorted(ka):
        ia, ib = a.items[key], b.items[key]
        ha, hb = a.doc_hashes.get(key), b.doc_hashes.get(key)
        if int(ia["gold"]) != int(ib["gold"]) or (ha and hb and ha != hb):
            raise UnpairableError(
                f"{task}: doc {key[0]!r} #{key[1]} differs between runs {labels[0]!r} and "
                f"{labels[1]!r} (prompt or gold); rerun both with the same data and settings"
            )
        if len(ia["ll"]) != len(ib["ll"]):
            raise UnpairableError(f"{task}: doc {key[0]!r} #{key[1]} has different label sets")
    return PairedTask(task, a, b, tuple(sorted(ka)))


def label_score_dtype(results: Mapping[str, Any]) -> str:
    """The precision of a run's label scores: ``float32`` for ``debiased_hf`` and replays, else
    the model's dtype as the harness recorded it (e.g. ``torch.bfloat16``), or ``unknown``."""
    cfg = results.get("config") or {}
    dtype = cfg.get("label_score_dtype") or cfg.get("model_dtype") or "unknown"
    return str(dtype).removeprefix("torch.")


def pair_runs(base: Run, other: Run) -> tuple[list[PairedTask], list[str]]:
    """The tasks both runs scored, checked doc by doc; notes name tasks only one run has."""
    labels = (base.label, other.label)
    da, db = label_score_dtype(base.results), label_score_dtype(other.results)
    if da != db:
        raise UnpairableError(
            f"run {labels[0]!r} scored labels in {da} but run {labels[1]!r} in {db}; ties and "
            "rounding differ between precisions, so compare runs at one precision (rescore a "
            "half-precision run with `lm-eval-robust replay RUN --features DIR -o OUT`)"
        )
    common = sorted(set(base.tasks) & set(other.tasks))
    if not common:
        raise UnpairableError(
            f"runs {labels[0]!r} ({', '.join(sorted(base.tasks))}) and {labels[1]!r} "
            f"({', '.join(sorted(other.tasks))}) share no task; run both on the same --tasks"
        )
    notes = [
        f"{t}: only in run {lab!r}; not compared"
        for lab, run, rest in ((labels[0], base, other), (labels[1], other, base))
        for t in sorted(set(run.tasks) - set(rest.tasks))
    ]
    return [_check_task(t, base.tasks[t], other.tasks[t], labels) for t in common], notes


def label_runs(
    paths: Sequence[str | Path], labels: Sequence[str] | None, stock_only: bool = False
) -> list[Run]:
    """Load several runs; labels default to the folder names, made unique. The same run given
    twice, and a label that would break a table (empty, ``|``, a line break), are refused."""
    if labels is not None and len(labels) != len(paths):
        raise ReportError(f"--labels gives {len(labels)} names for {len(paths)} runs")
    for lab in labels or []:
        if not lab or any(c in lab for c in "|\n\r\t`"):
            raise ReportError(
                f"--labels name {lab!r} is empty or holds |, a backtick or a line break, which "
                "would break the tables; use letters, digits, - _ . + and spaces"
            )
    runs = [load_run(p, labels[i] if labels else None, stock_only) for i, p in enumerate(paths)]
    seen_files: dict[Path, str] = {}
    for p, r in zip(paths, runs, strict=True):
        key = r.results_file.resolve()
        if key in seen_files:
            raise ReportError(
                f"{p} and {seen_files[key]} are the same run ({r.results_file.name}); give each "
                "run once"
            )
        seen_files[key] = str(p)
    seen: dict[str, int] = {}
    out = []
    for r in runs:
        n = seen.get(r.label, 0)
        seen[r.label] = n + 1
        out.append(r if n == 0 else replace(r, label=f"{r.label}#{n + 1}"))
    return out
