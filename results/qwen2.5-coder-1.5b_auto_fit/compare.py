"""Auto vs every fixed correction kind on the test split, paired by example (run by run.sh).

For each target, ``auto`` (run_auto/) is paired with each fixed kind's replay of the same logged
test run: the clustered BCa bootstrap of the report (10 000 resamples of source examples, seed 0)
gives auto − fixed for clean and perturbed BAC. Prints markdown (run.sh writes compare.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from lm_eval_robust.report.estimates import ReportSettings, summarize_pair
from lm_eval_robust.scoring.correction import load
from lm_eval_robust.values.pairing import load_run, pair_runs

HERE = Path(__file__).resolve().parent
TARGETS = (
    ("ni220_plain", "qwen2.5-coder-1.5b_ni220_all", "ni220_text_pert"),
    ("ni1297_plain", "qwen2.5-coder-1.5b_targets_all", "ni1297_text_pert"),
    ("ni1297_chat", "qwen2.5-coder-1.5b_chat_all", "ni1297_text_pert"),
)
#: fixed kind -> (run folder, correction folder) relative to the source folder; None: this folder
FIXED = (
    ("none", "fp32/base_run", None),
    ("constant", None, None),
    ("batch_calibration", "fp32/base_run_batch_calibration", "fp32/corrections_batch_calibration"),
    ("clean_calibration", "fp32/base_run_clean_calibration", "fp32/corrections_clean_calibration"),
    ("ridge_mean", "fp32/base_run_ridge_mean", "fp32/corrections_ridge_mean"),
    ("ridge_midpoint", "fp32/base_run_ridge", "fp32/corrections_ridge"),
)


def _pct(v: float) -> str:
    if not math.isfinite(v):
        return "–"
    text = f"{v:+.1f}"
    return "0.0" if text in ("+0.0", "-0.0") else text.replace("-", "−")


def _ci(e: object) -> str:
    value, low, high = (getattr(e, k) for k in ("value", "low", "high"))
    if not math.isfinite(low):
        return _pct(value) + " (no interval)"
    return f"{_pct(value)} [{_pct(low)}, {_pct(high)}]"


def _bac(run: object, task: str) -> tuple[float, float]:
    res = run.results["results"][task]  # type: ignore[attr-defined]
    return 100 * res["bac_clean,none"], 100 * res["bac_pert,none"]


def main() -> None:
    settings = ReportSettings()
    out: list[str] = []
    summary: list[str] = [
        "| target | auto chose | CV: none clean / pert | CV: chosen clean / pert | test BAC clean / "
        "pert (auto) |",
        "|---|---|---|---|---|",
    ]
    rows = [
        "| target | fixed kind | test BAC clean / pert (fixed) | auto − fixed: δ clean | "
        "auto − fixed: δ pert |",
        "|---|---|---|---|---|",
    ]
    record: dict[str, object] = {}
    for name, src_name, task in TARGETS:
        src = HERE.parent / src_name
        corr = load(HERE / name / "corrections_auto" / f"{task}.safetensors")
        info = corr.stats["auto"]
        table = {r["method"]: r for r in info["table"]}
        chosen = info["chosen"]
        auto = load_run(HERE / name / "run_auto", label="auto")
        a_clean, a_pert = _bac(auto, task)
        cv0, cvc = table["none"], table[chosen]
        summary.append(
            f"| {name} | **{chosen}** | {100 * cv0['bac_clean']:.1f} / {100 * cv0['bac_pert']:.1f}"
            f" | {100 * cvc['bac_clean']:.1f} / {100 * cvc['bac_pert']:.1f} | {a_clean:.1f} / "
            f"{a_pert:.1f} |"
        )
        record[name] = {"chosen": chosen, "test": {}}
        for kind, run_rel, corr_rel in FIXED:
            if kind == "constant":
                run_dir = HERE / name / "run_constant"
                if not run_dir.is_dir():
                    why = table["constant"]["skipped"] or "fit chose no offset: the base run"
                    rows.append(f"| {name} | constant | ({why}) | | |")
                    continue
            else:
                run_dir = src / str(run_rel)
            fixed = load_run(run_dir, label=kind)
            paired, _ = pair_runs(fixed, auto)
            p = next(pt for pt in paired if pt.task == task)
            pair = summarize_pair(fixed, auto, p, settings)
            f_clean, f_pert = _bac(fixed, task)
            same = ""
            if kind == chosen and corr_rel is not None:
                ref = load(src / corr_rel / f"{task}.safetensors")
                diff = float(np.max(np.abs(np.asarray(ref.beta) - np.asarray(corr.beta))))
                if ref.W is not None and corr.W is not None:
                    diff = max(diff, float(np.max(np.abs(ref.W - corr.W))))
                same = f" (= auto's choice; corrections differ by {diff:.1g})"
            elif kind == chosen == "none":
                same = " (= auto's choice)"
            dc, dp = pair.metrics["delta_clean"], pair.metrics["delta_pert"]
            rows.append(
                f"| {name} | {kind}{same} | {f_clean:.1f} / {f_pert:.1f} | {_ci(dc)} | {_ci(dp)} |"
            )
            record[name]["test"][kind] = {  # type: ignore[index]
                "bac_clean": f_clean,
                "bac_pert": f_pert,
                "auto_minus_fixed_clean": [dc.value, dc.low, dc.high],
                "auto_minus_fixed_pert": [dp.value, dp.low, dp.high],
            }
    out += ["## Auto's choice (CV on train, mean held-out BAC, percent)", "", *summary, ""]
    out += ["## Test split: auto − each fixed kind, paired by example", "", *rows, ""]
    out += [
        "Percent; [95 % CI]: clustered BCa, 10 000 resamples of source examples, seed 0 "
        "(`lm_eval_robust.report.estimates.summarize_pair`).",
    ]
    print("\n".join(out))
    (HERE / "compare.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
