"""scripts/wrap_chance_table.py: a task's chance level from its clean prompts, and the rule that
marks a reference model's clean score as at or below chance."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("wrap_chance_table")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def _line(pert_id: int, n_choices: int) -> str:
    doc = {"multiple_choice_targets": [str(i) for i in range(n_choices)], "_lmer": {}}
    doc["_lmer"]["pert_id"] = pert_id
    return json.dumps({"doc": doc}) + "\n"


def test_chance_level_is_the_mean_over_clean_prompts(tmp_path: Path) -> None:
    mod = _script()
    run = tmp_path / "run" / "model"
    run.mkdir(parents=True)
    lines = [_line(0, 2), _line(0, 4), _line(1, 10), _line(2, 10)]  # perturbed ones are skipped
    (run / "samples_t_x.jsonl").write_text("".join(lines))
    assert mod.chance_level([tmp_path / "run"], "t") == (0.5 + 0.25) / 2


def test_at_and_below_chance() -> None:
    mod = _script()
    assert mod._versus_chance({"value": 0.3, "low": 0.1, "high": 0.5}, 0.25) == " (at chance)"
    assert mod._versus_chance({"value": 0.6, "low": 0.4, "high": 0.8}, 0.25) == ""
    assert mod._versus_chance({"value": 0.0, "low": None, "high": None}, 0.1) == " (below chance)"
    assert mod._cell({"value": -0.125, "low": -0.25, "high": 0.0}, signed=True) == (
        "−12.5 [−25.0, +0.0]"
    )
