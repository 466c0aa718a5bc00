"""The generation datasets: records read from a local data directory or the canonical source.

Resolution is the one of the Natural Instructions tasks (:func:`~lm_eval_robust.tasks.data.
resolve_data_dir`): the ``data_dir`` task metadata, then ``LM_EVAL_ROBUST_DATA_DIR``, then a
download of the canonical file into the cache. A local directory holds ``nq_open/``, ``gsm8k/``,
``triviaqa/`` and ``xsum/`` (as ``../shared/data`` does).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lm_eval_robust.base.offline_models import cache_dir
from lm_eval_robust.tasks.data import ENV_VAR, DataError, _download, resolve_data_dir

__all__ = ["SOURCES", "Record", "Source", "load_records"]


@dataclass(frozen=True)
class Record:
    """One example: the input text, the reference answers, and a demonstration answer.

    ``answers`` are every accepted answer (NQ-open answers, TriviaQA aliases, GSM8K's final
    number, XSum's reference summary); ``demo_answer`` is what a few-shot demonstration shows
    (the first answer; GSM8K's worked solution ending in ``#### n``).
    """

    id: str
    text: str
    answers: tuple[str, ...]
    demo_answer: str


@dataclass(frozen=True)
class Source:
    """Where one dataset lives: its folder and file under the data root, and its canonical URL."""

    folder: str
    file: str
    url: str


SOURCES: dict[str, Source] = {
    "nq_open": Source(
        "nq_open",
        "NQ-open.dev.jsonl",
        "https://raw.githubusercontent.com/google-research-datasets/natural-questions/master/"
        "nq_open/NQ-open.dev.jsonl",
    ),
    "gsm8k": Source(
        "gsm8k",
        "test.jsonl",
        "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/"
        "data/test.jsonl",
    ),
    "triviaqa": Source(
        "triviaqa",
        "triviaqa-validation.jsonl",
        "https://raw.githubusercontent.com/Clouditera/opencompass/"
        "22d6f1ed0f94622199c04bc2220c34a6def5f2a2/data/triviaqa/triviaqa-validation.jsonl",
    ),
    "xsum": Source(
        "xsum",
        "test_1000.jsonl",
        "https://raw.githubusercontent.com/DavidFanzz/llm_decoding/main/data/xsum/test.jsonl",
    ),
}


def _gsm8k_final(answer: str) -> str:
    return answer.rsplit("####", 1)[-1].strip().replace(",", "")


def _record(dataset: str, i: int, row: dict[str, Any]) -> Record:
    if dataset == "gsm8k":
        sol = str(row["answer"])
        return Record(str(i), str(row["question"]), (_gsm8k_final(sol),), sol)
    if dataset == "xsum":
        summary = " ".join(str(row["summary"]).split())
        return Record(str(row.get("id", i)), str(row["document"]).strip(), (summary,), summary)
    answers = row["answer"]
    if isinstance(answers, str):
        answers = [answers]
    answers = tuple(str(a) for a in answers if str(a).strip())
    return Record(str(i), str(row["question"]).strip(), answers, answers[0] if answers else "")


def _path(dataset: str, data_dir: str | os.PathLike[str] | None) -> Path:
    src = SOURCES[dataset]
    root = resolve_data_dir(data_dir)
    if root is None:
        cached = cache_dir() / "data" / src.folder / src.file
        if not cached.is_file():
            _download(src.url, cached)
        return cached
    for cand in (root / src.folder / src.file, root / src.file):
        if cand.is_file():
            return cand
    raise DataError(
        f"{src.folder}/{src.file} not found under {str(root)!r}; point data_dir (or {ENV_VAR}) "
        f"at the folder that holds {src.folder}/, or unset it to download the canonical file"
    )


def load_records(dataset: str, data_dir: str | os.PathLike[str] | None = None) -> list[Record]:
    """Every usable record of ``dataset`` in file order (records without an answer skipped)."""
    if dataset not in SOURCES:
        raise DataError(f"unknown generation dataset {dataset!r}; known: {sorted(SOURCES)}")
    path = _path(dataset, data_dir)
    from lm_eval_robust.base.validate import regular_file

    regular_file(path, "data file", "make it readable or point data_dir at another copy", DataError)
    out: list[Record] = []
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                rec = _record(dataset, i, row)
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise DataError(
                    f"{path} line {i + 1} is not a {dataset} record ({exc!r}); replace the file "
                    "with the canonical copy"
                ) from None
            if rec.answers and rec.text:
                out.append(rec)
    if not out:
        raise DataError(f"{path} holds no {dataset} records; replace the file")
    return out
