"""Writes fit_summary.md: the train statistics every layer correction in this folder stores.

Run from the repository root: python results/qwen2.5-coder-1.5b_generation/fit_summary.py
"""

import json
from pathlib import Path

from safetensors import safe_open

HERE = Path(__file__).parent
rows = [
    "| corrections | task | layer | k | λ | top-k share of difference variance "
    "| top-k shift RMS before → after (train) | chosen by |",
    "|---|---|---|---|---|---|---|---|",
]
for f in sorted(
    HERE.glob("corrections*/L*/*.safetensors"),
    key=lambda p: (p.parts[-3], p.stem, int(p.parts[-2][1:])),
):
    with safe_open(str(f), "np") as fh:
        md = json.loads(fh.metadata()["lm_eval_robust"])
    st = md["stats"]
    sel = st.get("generation_selection", {}).get("chosen")
    how = "CV squared error" if sel is None else f"held-out EM: {json.dumps(sel)}"
    rows.append(
        f"| {f.parts[-3]} | {f.stem.removesuffix('_text_pert')} | {md['layer']} | {md['k']} "
        f"| {md['lam']:.3g} | {st.get('explained_variance_top_k', float('nan')):.2f} "
        f"| {st.get('top_k_shift_rms_before', float('nan')):.3g} → "
        f"{st.get('top_k_shift_rms_after', float('nan')):.3g} | {how} |"
    )
(HERE / "fit_summary.md").write_text("\n".join(rows) + "\n", encoding="utf-8")
print("\n".join(rows))
