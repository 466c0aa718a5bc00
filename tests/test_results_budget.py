"""Committed runs stay small: samples compressed, folders within the budget of results/README.md."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
BUDGET_MB = 60.0


def _over_budget_listed() -> set[str]:
    text = (RESULTS / "README.md").read_text(encoding="utf-8")
    table = text.split("| over budget |", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([^`/]+)/` \|", table, flags=re.M))


def test_budget_stated_in_results_readme() -> None:
    text = (RESULTS / "README.md").read_text(encoding="utf-8")
    assert f"At most {BUDGET_MB:.0f} MB per folder" in text


def test_no_uncompressed_samples_committed() -> None:
    raw = sorted(str(p.relative_to(RESULTS)) for p in RESULTS.rglob("samples_*.jsonl"))
    assert not raw, f"compress with scripts/compress_samples.py: {raw[:5]}"


def test_folders_within_budget_or_listed() -> None:
    listed = _over_budget_listed()
    over = []
    for folder in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6
        if size > BUDGET_MB and folder.name not in listed:
            over.append(f"{folder.name} ({size:.0f} MB)")
    assert not over, (
        f"over the {BUDGET_MB:.0f} MB budget and not listed in results/README.md: {over}"
    )


def test_every_folder_indexed() -> None:
    text = (RESULTS / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in RESULTS.iterdir() if p.is_dir() and f"[`{p.name}/`]" not in text]
    assert not missing, f"add to the index of results/README.md: {missing}"
