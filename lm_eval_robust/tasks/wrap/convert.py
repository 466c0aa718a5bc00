"""Local copies of BIG-bench and GSM8K in the schemas lm-eval's stock tasks read.

BIG-bench: each ``<folder>/task.json`` (``examples`` of ``{"input", "target_scores"}`` and
optional prompt parts) becomes rows of the hub dataset ``hails/bigbench`` that lm-eval's
``bigbench_*_multiple_choice`` tasks read: ``idx``, ``inputs``, ``targets``,
``multiple_choice_targets``, ``multiple_choice_scores``, written to
``<out>/bigbench/<task>_zero_shot/default.jsonl``. A subtask folder (``<task>_<subtask>``, whose
``task.json`` names the subtask) joins its task's file, as the hub's per-task configs hold every
subtask. ``inputs`` follows BIG-bench's own JSON-task formatting (``bigbench/api/json_task.py``):
``task_prefix`` + ``example_input_prefix`` (default ``"\\nQ: "``) + input + (when
``append_choices_to_input``, default true: ``choice_prefix`` (default ``"\\n  choice: "``) before
each answer, sorted and then shuffled with a seed per example) + ``example_output_prefix``
(default ``"\\nA: "``), with surrounding whitespace stripped (the task's target delimiter adds
the space before an answer). The hub files were not reachable to compare byte for byte.

GSM8K: ``test.jsonl`` already has the stock task's fields (``question``, ``answer``); it is
copied to ``<out>/gsm8k/main/test.jsonl``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lm_eval_robust.tasks.perturb.rng import seeded_rng
from lm_eval_robust.tasks.wrap.settings import WrapError

DEFAULT_INPUT_PREFIX = "\nQ: "
DEFAULT_OUTPUT_PREFIX = "\nA: "
DEFAULT_CHOICE_PREFIX = "\n  choice: "


def _task_of(folder: Path, data: Mapping[str, Any]) -> str:
    """The hub task a folder belongs to (its parent task for a subtask folder)."""
    name = str(data.get("name") or folder.name)
    if folder.name != name and folder.name.endswith("_" + name):
        return folder.name[: -len(name) - 1]
    return folder.name


def bigbench_rows(task: str, data: Mapping[str, Any], start: int = 0) -> list[dict[str, Any]]:
    """Hub-schema rows of one ``task.json`` (``idx`` counted from ``start``)."""
    prefix = str(data.get("task_prefix", ""))
    in_prefix = str(data.get("example_input_prefix", DEFAULT_INPUT_PREFIX))
    out_prefix = str(data.get("example_output_prefix", DEFAULT_OUTPUT_PREFIX))
    choice_prefix = str(data.get("choice_prefix", DEFAULT_CHOICE_PREFIX))
    append = bool(data.get("append_choices_to_input", True))
    rows: list[dict[str, Any]] = []
    for i, ex in enumerate(data["examples"]):
        scores = ex.get("target_scores")
        if not isinstance(scores, Mapping) or not scores:
            continue
        text = str(ex["input"])
        if append:
            shown = sorted(scores)
            seeded_rng("bigbench-choices", task, start + i).shuffle(shown)
            text += choice_prefix + choice_prefix.join(shown)
        targets = [k for k, v in scores.items() if v == max(scores.values())][:1]
        rows.append(
            {
                "idx": start + len(rows),
                "inputs": (prefix + in_prefix + text + out_prefix).strip(),
                "targets": targets,
                "multiple_choice_targets": list(scores),
                "multiple_choice_scores": [int(v) for v in scores.values()],
            }
        )
    return rows


def convert_bigbench(src: str | Path, out: str | Path) -> dict[str, int]:
    """Write every task of ``src`` (folders holding ``task.json``); task -> rows written."""
    src = Path(src)
    folders = sorted(p.parent for p in src.glob("*/task.json"))
    if not folders:
        raise WrapError(f"no */task.json under {src}; point --bigbench at the BIG-bench folder")
    by_task: dict[str, list[dict[str, Any]]] = {}
    for folder in folders:
        data = json.loads((folder / "task.json").read_text(encoding="utf-8"))
        task = _task_of(folder, data)
        rows = by_task.setdefault(task, [])
        rows.extend(bigbench_rows(task, data, start=len(rows)))
    counts = {}
    for task, rows in by_task.items():
        _write_jsonl(Path(out) / "bigbench" / f"{task}_zero_shot" / "default.jsonl", rows)
        counts[task] = len(rows)
    return counts


def convert_gsm8k(src: str | Path, out: str | Path) -> int:
    """Copy GSM8K's ``test.jsonl`` to ``<out>/gsm8k/main/test.jsonl``; rows copied."""
    path = Path(src)
    path = path / "test.jsonl" if path.is_dir() else path
    if not path.is_file():
        raise WrapError(f"{path} not found; point --gsm8k at the folder holding test.jsonl")
    with path.open(encoding="utf-8") as f:
        first = json.loads(f.readline())
    if not {"question", "answer"} <= set(first):
        raise WrapError(f"{path} has no question/answer fields; use GSM8K's own test.jsonl")
    dest = Path(out) / "gsm8k" / "main" / "test.jsonl"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, dest)
    with dest.open(encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def _write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)
