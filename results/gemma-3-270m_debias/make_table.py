"""Base vs debiased table for this run (reads the lm_eval results, the fit log and the features).

    python results/gemma-3-270m_debias/make_table.py > results/gemma-3-270m_debias/table.md

Ridge rows: measured by lm_eval with `correction=corrections` (debiased_run/) against the base run
../gemma-3-270m_n10 (same docs, same computation path). Constant rows: the input-independent
offsets of corrections_constant/ applied to the raw test features that the debiased run recorded
(an offset changes only the label logits, so this equals running the model with it).
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np

from lm_eval_robust.scoring.correction import load
from lm_eval_robust.stats.classification import balanced_accuracy
from lm_eval_robust.values.features import load_features

HERE = Path(__file__).resolve().parent


def _num(v: float) -> str:
    return "–" if v != v else f"{v:.1f}"


def results(folder: Path) -> dict:
    files = sorted(glob.glob(str(folder / "*" / "results_*.json")))
    return json.loads(Path(files[-1]).read_text())["results"]


def main() -> None:
    base = results(HERE.parent / "gemma-3-270m_n10")
    deb = results(HERE / "debiased_run")
    print(
        "| task | kind | method | bac_clean | bac_pert | δ_drop | δ_clean | δ_pert | p_εV | "
        "p_εL | maj share pert (base → debiased) | λ |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for name in sorted(deb, key=lambda t: (t.split("_")[1], int(t.split("_")[0][2:]))):
        short, kind = name.split("_")[:2]
        b, d = base[name], deb[name]
        corr = load(HERE / "corrections" / f"{name}.safetensors")
        radii = corr.stats.get("radii", {})
        print(
            f"| {short} | {kind} | ridge | {b['bac_clean,none']:.3f} | {b['bac_pert,none']:.3f} | "
            f"{b['delta_drop,none']:+.3f} | {d['bac_clean,none'] - b['bac_clean,none']:+.3f} | "
            f"{d['bac_pert,none'] - b['bac_pert,none']:+.3f} | {radii.get('p_eps_V', float('nan')):.1f} | "
            f"– | {b['maj_share_pert,none']:.2f} → {d['maj_share_pert,none']:.2f} | {corr.lam:.3g} |"
        )
        feats = load_features(HERE / "features" / name)
        m, g = feats.label_logits, feats.gold
        clean = feats.pert_id == 0
        pert = ~clean

        def bac(lg: np.ndarray, rows: np.ndarray) -> float:
            return balanced_accuracy(g[rows], lg[rows].argmax(1))

        for folder, label in (
            ("corrections_constant", "constant"),
            ("corrections_bc", "batch cal."),
            ("corrections_cc", "contextual cal."),
        ):
            path = HERE / folder / f"{name}.safetensors"
            if not path.exists():
                why = "no overlap (train)" if folder == "corrections_constant" else "not fitted"
                print(f"| {short} | {kind} | {label} | | | | – | – | – | – | {why} | |")
                continue
            c = load(path)
            fixed = m - np.asarray(c.beta)
            dc = bac(fixed, clean) - bac(m, clean)
            dp = bac(fixed, pert) - bac(m, pert)
            st = c.stats
            desc = f"{label} (b={st['b']:+.2f})" if "b" in st else label
            p_v = st.get("p_eps_V", st.get("radii", {}).get("p_eps_V", float("nan")))
            p_l = st.get("p_eps_L", st.get("radii", {}).get("p_eps_L", float("nan")))
            print(
                f"| {short} | {kind} | {desc} | | | | {dc:+.3f} | {dp:+.3f} | {_num(p_v)} | "
                f"{_num(p_l)} | | |"
            )


if __name__ == "__main__":
    main()
