"""The stock metric of wrapped runs, one row per model and task: clean, perturbed, drop (± the
clustered stderr lm-eval wrote), beside BAC and the majority share of the clean predictions.

    python scripts/wrap_results_table.py results/wrap_bigbench/navigate/runs/* > table.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _fmt(res: dict[str, object], key: str, signed: bool = False) -> str:
    if f"{key},none" not in res and f"robust_{key},none" in res:
        key = f"robust_{key}"  # our measures under their harness names (harness_names)
    v = res.get(f"{key},none")
    se = res.get(f"{key}_stderr,none")
    if not isinstance(v, float) or v != v:
        return "n/a"
    text = f"{100 * v:+.1f}" if signed else f"{100 * v:.1f}"
    return text + (f" ± {100 * se:.1f}" if isinstance(se, float) and se == se else "")


def main(paths: list[str]) -> None:
    print(
        "| model | task | examples × prompts | stock acc clean | stock acc perturbed | "
        "stock acc drop | clean BAC | perturbed BAC | majority share (clean) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for p in paths:
        for f in sorted(Path(p).rglob("results_*.json")):
            data = json.loads(f.read_text(encoding="utf-8"))
            args = data["config"]["model_args"]
            pretrained = (
                args.get("pretrained")
                if isinstance(args, dict)
                else str(args).split("pretrained=")[-1].split(",")[0]
            )
            model = Path(str(pretrained)).name
            for task, res in sorted(data["results"].items()):
                wrapped = data["configs"][task].get("wrapped_task", {})
                size = f"{wrapped.get('n_examples')} × {1 + int(wrapped.get('n_perturbations', 0))}"
                print(
                    f"| {model} | {task} | {size} | {_fmt(res, 'stock_acc_clean')} | "
                    f"{_fmt(res, 'stock_acc_pert')} | {_fmt(res, 'stock_acc_drop', True)} | "
                    f"{_fmt(res, 'bac_clean')} | {_fmt(res, 'bac_pert')} | "
                    f"{_fmt(res, 'maj_share_clean')} |"
                )


if __name__ == "__main__":
    main(sys.argv[1:])
