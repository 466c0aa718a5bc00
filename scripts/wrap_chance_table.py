"""Each wrapped task's drop in the task's own metric, per model, beside a reference model's clean
score and the task's chance level: where the reference model is at chance, no drop can be read.

    python scripts/wrap_chance_table.py LEADERBOARD_DIR RUN [RUN ...] \
        --reference qwen2.5-coder-1.5b-instruct > chance.md

``LEADERBOARD_DIR`` is what ``lm-eval-robust leaderboard`` wrote over the runs (its
``leaderboard.json`` gives every cell and its clustered BCa interval); the runs give the chance
level of each task: the mean over its clean prompts of 1 / the number of choices (a model that
picks a choice at random). "at chance" means the interval of the reference model's clean score
holds that level.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# one rendering of a cell for the README tables (the scripts folder is on sys.path when run)
from wrap_mean_rows import cell as _cell


def _samples(run: Path, task: str) -> Iterator[dict[str, Any]]:
    """The task's logged samples (``.jsonl`` or ``.jsonl.gz``), read as the report reads them:
    a cut or corrupt file is one line naming it."""
    from lm_eval_robust.base.errors import UserError
    from lm_eval_robust.values.pairing import read_sample_lines

    for path in sorted(run.rglob(f"samples_{task}_*.jsonl*")):
        for _, sample in read_sample_lines(path, UserError):
            yield sample


def chance_level(runs: list[Path], task: str) -> float:
    """Mean of 1 / choices over the task's clean prompts (the first run that has the task)."""
    for run in runs:
        shares = [
            1.0 / len(s["doc"]["multiple_choice_targets"])
            for s in _samples(run, task)
            if s["doc"].get("_lmer", {}).get("pert_id") == 0
            and s["doc"].get("multiple_choice_targets")
        ]
        if shares:
            return sum(shares) / len(shares)
    return float("nan")


def _bounds(c: dict[str, Any]) -> tuple[float, float]:
    """The interval; a cell whose resamples never vary (every prompt alike) has none: its value."""
    lo, hi = c.get("low"), c.get("high")
    return (c["value"], c["value"]) if lo is None or hi is None else (lo, hi)


def _versus_chance(clean: dict[str, Any], chance: float) -> str:
    """`` (at chance)`` when the interval holds the chance level, `` (below chance)`` when it
    lies below it, else nothing."""
    lo, hi = _bounds(clean)
    if hi < chance:
        return " (below chance)"
    return " (at chance)" if lo <= chance else ""


def table(board: dict[str, Any], runs: list[Path], reference: str) -> str:
    rows = [r for r in board["rows"] if r["task"] != "mean" and r.get("stock")]
    models = [m for m in board["models"] if m != reference]
    tasks = sorted({(r["task"], r["kind"]) for r in rows})
    by = {(r["task"], r["model"]): r for r in rows}
    metric = next(iter(rows[0]["stock"])) if rows else "acc"
    head = [
        "task",
        "kind",
        "chance",
        f"{reference} {metric} clean",
        f"{reference} {metric} drop",
        *(f"{m} {metric} drop" for m in models),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    n_at_chance = 0
    for task, kind in tasks:
        chance = chance_level(runs, task)
        ref = by.get((task, reference))
        cells = [task.replace("bigbench_", "").split("_multiple_choice")[0], kind]
        cells.append(f"{100 * chance:.1f}")
        if ref is None:
            cells += ["–", "–"]
        else:
            st = ref["stock"][metric]["metrics"]
            cells.append(_cell(st["clean"]) + _versus_chance(st["clean"], chance))
            n_at_chance += _versus_chance(st["clean"], chance) != ""
            cells.append(_cell(st["drop"], signed=True))
        for m in models:
            r = by.get((task, m))
            cells.append("–" if r is None else _cell(r["stock"][metric]["metrics"]["drop"], True))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"{reference} is at or below chance (the interval of its clean {metric} holds the chance "
        f"level, or lies below it) on {n_at_chance} of {len(tasks)} task rows.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("leaderboard", type=Path, help="folder written by lm-eval-robust leaderboard")
    ap.add_argument("runs", nargs="+", type=Path, help="the run folders it read")
    ap.add_argument("--reference", required=True, help="the model whose clean score is shown")
    args = ap.parse_args()
    from lm_eval_robust.base.errors import UserError

    board_file = args.leaderboard / "leaderboard.json"
    if not board_file.is_file():
        raise SystemExit(
            f"wrap_chance_table: {board_file} not found; give the folder lm-eval-robust "
            "leaderboard wrote"
        )
    board = json.loads(board_file.read_text(encoding="utf-8"))
    if args.reference not in board["models"]:
        raise SystemExit(
            f"wrap_chance_table: {args.reference!r} is not a model of {args.leaderboard} "
            f"({', '.join(board['models'])})"
        )
    try:
        print(table(board, args.runs, args.reference), end="")
    except UserError as exc:
        raise SystemExit(f"wrap_chance_table: {exc}") from None


if __name__ == "__main__":
    main()
