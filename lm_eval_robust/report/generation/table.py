"""The Table-4-shaped summary of a layer sweep: ``python -m lm_eval_robust.report.generation.table
DIR``.

``DIR/runs/<label>_<group>/`` are harness output folders (``--output_path``); ``<label>`` is
``base`` (no correction) or ``L<layer>``, optionally with ``-<variant>`` parts such as
``L14-k4`` or ``L7-all`` (with that layer's correction); a label's groups are merged. Per task:
the base model's clean and perturbed score and ``δ_drop`` = perturbed − clean (negative is a
drop; the paper prints its magnitude), each with the 95 % normal interval of its clustered
bootstrap standard error (``<metric>_stderr`` in the run's results: examples resampled with all
their prompts), then per debiased label
``p_recover = 100 (pert_debiased − pert_base) / (clean_base − pert_base)`` (n/a when there is no
drop) and ``δ_clean`` = clean_debiased − clean_base. Scores: EM for NQ-open,
TriviaQA and GSM8K, F1 for XSum, in percent.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

from lm_eval_robust.base.harness_names import short_metric, short_task

PRIMARY = {
    "nq_open_text_pert": "em",
    "gsm8k_text_pert": "em",
    "triviaqa_text_pert": "em",
    "xsum_text_pert": "f1",
}
LABEL = re.compile(r"^(base|L\d+(?:-[a-z0-9]+)*)(?:_|$)")


def read_runs(directory: Path) -> dict[str, dict[str, dict[str, float]]]:
    """label -> task -> metric -> value, from every results_*.json under ``directory/runs``."""
    from lm_eval_robust.values.pairing import read_results

    out: dict[str, dict[str, dict[str, float]]] = {}
    for f in sorted((directory / "runs").glob("*/**/results_*.json")):
        run = f.relative_to(directory / "runs").parts[0]
        m = LABEL.match(run)
        if m is None:
            continue
        res = read_results(f)["results"]  # one line for a cut or misshapen file
        for task, vals in res.items():
            # values and their clustered bootstrap standard errors (``<metric>_stderr``)
            metrics = {
                short_metric(k): float(v)
                for k, v in vals.items()
                if "," in k and isinstance(v, int | float) and not isinstance(v, bool)
            }
            # old runs and new ones (``robust_`` names) under the same keys
            out.setdefault(m.group(1), {})[short_task(task)] = metrics
    return out


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.1f}"


def _with_ci(v: float | None, se: float | None) -> str:
    """``v [v - 1.96 se, v + 1.96 se]``: the normal interval of the clustered bootstrap SE."""
    if v is None or se is None or not (math.isfinite(v) and math.isfinite(se)) or se <= 0:
        return _fmt(v)
    return f"{v:.1f} [{v - 1.96 * se:.1f}, {v + 1.96 * se:.1f}]"


def _layer_key(label: str) -> tuple[int, str]:
    num = re.match(r"L(\d+)", label)
    return (int(num.group(1)) if num else -1, label)


def render(runs: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown: tasks as columns in Table 4's order."""
    base = runs.get("base", {})
    tasks = [t for t in PRIMARY if t in base]
    if not tasks:
        return "no base run found\n"
    head = "| | " + " | ".join(t.removesuffix("_text_pert") for t in tasks) + " |"
    lines = [head, "|---" * (len(tasks) + 1) + "|"]

    def row(name: str, cells: list[str]) -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    def score(label: str, task: str, which: str) -> float | None:
        v = runs.get(label, {}).get(task, {}).get(f"{PRIMARY[task]}_{which}")
        return v

    def ci(label: str, task: str, which: str) -> str:
        se = runs.get(label, {}).get(task, {}).get(f"{PRIMARY[task]}_{which}_stderr")
        return _with_ci(score(label, task, which), se)

    row("clean (base)", [f"{ci('base', t, 'clean')} {PRIMARY[t].upper()}" for t in tasks])
    row("perturbed (base)", [ci("base", t, "pert") for t in tasks])
    row("δ_drop", [ci("base", t, "drop") for t in tasks])
    for label in sorted((k for k in runs if k != "base"), key=_layer_key):
        rec, dcl = [], []
        for t in tasks:
            c0, p0 = score("base", t, "clean"), score("base", t, "pert")
            c1, p1 = score(label, t, "clean"), score(label, t, "pert")
            if None in (c0, p0, c1, p1):
                rec.append("–")
                dcl.append("–")
                continue
            assert c0 is not None and p0 is not None and c1 is not None and p1 is not None
            dmg = c0 - p0
            rec.append(_fmt(100 * (p1 - p0) / dmg) if dmg > 1e-9 else "n/a (no drop)")
            dcl.append(_fmt(c1 - c0))
        row(f"{label} p_recover", rec)
        row(f"{label} δ_clean", dcl)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0] if args else ".")
    print(render(read_runs(directory)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
