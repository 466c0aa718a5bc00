"""Committed runs stay small: samples compressed, folders within the budgets of results/README.md,
feature shards listed in the checksum manifest with the script that regenerates them."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: a folder added from now on: what a reader needs (reports, figures, results JSON, samples only
#: where a committed command reads them), no feature shards
BUDGET_MB = 5.0
#: the folders committed before that budget, and theirs
LEGACY_BUDGET_MB = 60.0
LEGACY = frozenset(
    {
        "certificate_validity",
        "gemma-3-270m_all10",
        "gemma-3-270m_baselines",
        "gemma-3-270m_debias",
        "gemma-3-270m_full_protocol",
        "gemma-3-270m_gen_select",
        "gemma-3-270m_generation",
        "gemma-3-270m_n10",
        "gemma-3-270m_n10_cached_fresh_venv",
        "gemma-3-270m_n10_query_scope",
        "gemma-3-270m_select",
        "leaderboard",
        "qwen2.5-coder-1.5b_auto_fit",
        "qwen2.5-coder-1.5b_chat_all",
        "qwen2.5-coder-1.5b_chat_targets",
        "qwen2.5-coder-1.5b_confirmed",
        "qwen2.5-coder-1.5b_generation",
        "qwen2.5-coder-1.5b_ni1286_all",
        "qwen2.5-coder-1.5b_ni220_all",
        "qwen2.5-coder-1.5b_ni220_k200",
        "qwen2.5-coder-1.5b_select",
        "qwen2.5-coder-1.5b_targets",
        "qwen2.5-coder-1.5b_targets_all",
    }
)


def _readme() -> str:
    return (RESULTS / "README.md").read_text(encoding="utf-8")


def _over_budget_listed() -> set[str]:
    table = _readme().split("| over budget |", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([^`/]+)/` \|", table, flags=re.M))


def _size_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


def _manifest() -> object:
    scripts = str(RESULTS.parent / "scripts")
    sys.path.insert(0, scripts)
    try:
        return importlib.import_module("features_manifest")
    finally:
        sys.path.remove(scripts)


def test_budgets_stated_in_results_readme() -> None:
    text = _readme()
    assert f"At most {BUDGET_MB:.0f} MB per new folder" in text
    assert f"{LEGACY_BUDGET_MB:.0f} MB" in text


def test_no_uncompressed_samples_committed() -> None:
    raw = sorted(str(p.relative_to(RESULTS)) for p in RESULTS.rglob("samples_*.jsonl"))
    assert not raw, f"compress with scripts/compress_samples.py: {raw[:5]}"


def test_folders_within_budget_or_listed() -> None:
    listed = _over_budget_listed()
    over = []
    for folder in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
        budget = LEGACY_BUDGET_MB if folder.name in LEGACY else BUDGET_MB
        size = _size_mb(folder)
        if size > budget and folder.name not in listed:
            over.append(f"{folder.name} ({size:.1f} MB > {budget:.0f} MB)")
    assert not over, f"over budget and not listed in results/README.md: {over}"


def test_over_budget_list_holds_only_legacy_folders() -> None:
    # a new folder cannot buy its way past the budget by a line in the README
    assert _over_budget_listed() <= LEGACY


def test_every_folder_indexed() -> None:
    text = _readme()
    missing = [p.name for p in RESULTS.iterdir() if p.is_dir() and f"[`{p.name}/`]" not in text]
    assert not missing, f"add to the index of results/README.md: {missing}"


def test_feature_shards_are_listed_in_the_manifest() -> None:
    fm = _manifest()
    listed = fm.read_manifest()  # type: ignore[attr-defined]
    present = [str(p) for p in fm.shards()]  # type: ignore[attr-defined]
    unlisted = [p for p in present if p not in listed]
    assert not unlisted, f"run python scripts/features_manifest.py: {unlisted[:5]}"
    new = sorted({p.split("/")[0] for p in present} - LEGACY)
    assert not new, f"feature shards in new folders (regenerate them, don't commit): {new}"


def test_every_folder_with_shards_names_its_regenerating_script() -> None:
    fm = _manifest()
    folders = sorted({p.split("/")[0] for p in fm.read_manifest()})  # type: ignore[attr-defined]
    table = _readme().split("| folder with features |", 1)[1].split("\n\n", 1)[0]
    for folder in folders:
        m = re.search(rf"^\| `{re.escape(folder)}/` \| `([^`]+)` \|", table, flags=re.M)
        assert m, f"results/README.md: name the script that regenerates {folder}'s features"
        script = m.group(1).split()[-1]
        assert (RESULTS.parent / script).is_file(), script
