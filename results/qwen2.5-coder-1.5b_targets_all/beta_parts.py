"""Which part of the ridge correction moves ni1297's perturbed test BAC: W (input-dependent) or
β (the midpoint of the train residuals' range)? Reads the committed features and corrections;
writes beta_parts.md. Run from the repository root after run.sh and beta_mean.sh:
python results/qwen2.5-coder-1.5b_targets_all/beta_parts.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from lm_eval_robust.scoring.correction import load
from lm_eval_robust.scoring.debias import apply_correction
from lm_eval_robust.stats.classification import balanced_accuracy
from lm_eval_robust.values.features import load_features

HERE = Path(__file__).parent


def bias(corr_file: Path, x: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """``b(x) = ψ(x)W + β`` of a correction on rows ``x`` (float64)."""
    corr = load(corr_file)
    with torch.no_grad():
        lg = torch.from_numpy(logits)
        return (lg - apply_correction(corr, torch.from_numpy(x), lg)).double().numpy()


def main() -> None:
    lines = [
        "# Parts of the ridge correction on the perturbed test prompts (BAC, percent)",
        "",
        "| task | train BAC pert, uncorrected | test: none | ridge (W + β midpoint) | W only | "
        "β midpoint only | ridge, β mean |",
        "|---|---|---|---|---|---|---|",
    ]
    for task in ("ni069_text_pert", "ni1297_text_pert"):
        test = load_features(HERE / "features" / task).paired()
        train = load_features(HERE / "features" / f"{task}_train").paired()
        mid_file = HERE / "corrections_ridge" / f"{task}.safetensors"
        b_mid = bias(mid_file, test.x_pert, test.logits_pert)
        beta = np.asarray(load(mid_file).beta)
        b_mean = bias(
            HERE / "corrections_ridge_mean" / f"{task}.safetensors", test.x_pert, test.logits_pert
        )

        def bac(b: np.ndarray, p: object = test) -> float:
            return 100 * balanced_accuracy(p.gold, (p.logits_pert - b).argmax(1))  # type: ignore[attr-defined]

        cells = [
            bac(np.zeros(1), train),
            bac(np.zeros(1)),
            bac(b_mid),
            bac(b_mid - beta),
            bac(np.broadcast_to(beta, b_mid.shape)),
            bac(b_mean),
        ]
        lines.append(f"| {task} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    (HERE / "beta_parts.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
