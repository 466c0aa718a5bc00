"""How much of TriviaQA's drop can any edit of the last prompt token's state undo?

The layer corrections of this folder edit one vector: the state of the last prompt token after
decoder layer L (`positions=prompt`). This script measures their ceiling. For each test example
it runs the clean prompt, records that state at layers 0, 7, 14 and 27, and then generates the
perturbed prompt with the state at layer L *replaced* by the clean one: the edit a fitted
correction approximates (undo the perturbation's shift), done exactly, with the clean prompt
known. If it recovers little, the drop does not live in that vector, and a better estimate of the
shift (another `k`, λ or fitting rule) will not recover it either.

Same test prompts as run.sh (its --metadata), greedy, 16 new tokens cut at the task's stop
sequences, float32, batches of 16 left-padded prompts. Writes oracle_patch.md / .json here.
Run from the repository root, in the project's venv, with the data directory as for run.sh
(`--render` rewrites the table from oracle_patch.json; a number N, a smoke test on N examples):
  LM_EVAL_ROBUST_DATA_DIR=../shared/data \
    python results/qwen2.5-coder-1.5b_generation/oracle_patch.py
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from lm_eval_robust.base.offline_models import resolve_pretrained
from lm_eval_robust.report.generation.sweep import read_run
from lm_eval_robust.scoring.generation.layers import decoder_layers
from lm_eval_robust.stats.bootstrap import cluster_bootstrap_ci, linear_stat
from lm_eval_robust.tasks.generation.metrics import cut_at_stop, score_generation
from lm_eval_robust.tasks.generation.tasks import build_docs, get_task
from lm_eval_robust.tasks.settings import GenConfig

HERE = Path(__file__).parent
META = {"n_examples": 130, "n_train": 50, "n_perturbations": 5, "n_fit_perturbations": 4}
META["n_shots"] = 1
LAYERS = (0, 7, 14, 27)
BATCH = 16
MAX_NEW = 16
TASK = "triviaqa"


@contextmanager
def at_layer(block: torch.nn.Module, record: list[torch.Tensor] | None, put: torch.Tensor | None):
    """On the prompt pass only (more than one position): record or replace the last position."""

    def hook(_m: torch.nn.Module, _i: Any, out: Any) -> Any:
        h = out[0] if isinstance(out, tuple) else out
        if h.shape[1] == 1:
            return out
        if record is not None:
            record.append(h[:, -1].detach().clone())
        if put is not None:
            h = h.clone()
            h[:, -1] = put.to(h.dtype)
            return (h, *out[1:]) if isinstance(out, tuple) else h
        return out

    handle = block.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def generate(model: Any, tok: Any, prompts: list[str]) -> list[str]:
    enc = tok(prompts, return_tensors="pt", padding=True)
    out = model.generate(
        **enc, max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=tok.pad_token_id
    )
    return tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)


def batches(n: int) -> Iterator[slice]:
    for i in range(0, n, BATCH):
        yield slice(i, min(i + BATCH, n))


def main(limit: int | None = None) -> None:
    """``limit``: a smoke test on the first examples; prints, writes nothing."""
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    path = resolve_pretrained("qwen2.5-coder-1.5b-instruct")
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    blocks = decoder_layers(model)
    task = get_task(TASK)
    docs = build_docs(TASK, "text", "test", GenConfig.from_metadata(META))
    clean = [d for d in docs if d["pert_id"] == 0]
    pert = {d["example_id"]: d for d in docs if d["pert_id"] != 0}
    clean = clean[:limit]
    pert_docs = [pert[d["example_id"]] for d in clean]
    n = len(clean)

    def em(doc: dict[str, Any], text: str) -> float:
        return score_generation(task.metric, text, doc["answers"], task.until)["em"]

    texts: dict[str, list[str]] = {"clean": [], "pert": []}
    states: dict[int, list[torch.Tensor]] = {L: [] for L in LAYERS}
    with torch.inference_mode():
        for s in tqdm(list(batches(n)), desc="clean (recording states)"):
            with ExitStack() as stack:  # record every layer of ``states`` in the one pass
                for L in LAYERS:
                    stack.enter_context(at_layer(blocks[L], states[L], None))
                texts["clean"] += generate(model, tok, [d["prompt"] for d in clean[s]])
        for s in tqdm(list(batches(n)), desc="perturbed"):
            texts["pert"] += generate(model, tok, [d["prompt"] for d in pert_docs[s]])
        for L in LAYERS:
            clean_states = torch.cat(states[L])
            key = f"pert, L{L} last-token state := clean"
            texts[key] = []
            for s in tqdm(list(batches(n)), desc=f"perturbed, oracle at L{L}"):
                with at_layer(blocks[L], None, clean_states[s]):
                    texts[key] += generate(model, tok, [d["prompt"] for d in pert_docs[s]])

    # the base run's generations, to check this script generates what the harness did
    ref = read_run(HERE / "runs" / "base", f"{TASK}_text_pert", "em").texts
    same = sum(
        cut_at_stop(t, task.until).strip()
        == cut_at_stop(ref[(d["example_id"], 0)], task.until).strip()
        for d, t in zip(clean, texts["clean"], strict=True)
    )
    scores = {
        k: np.array(
            [em(d, t) for d, t in zip(clean if k == "clean" else pert_docs, v, strict=True)]
        )
        for k, v in texts.items()
    }
    c0, p0 = scores["clean"], scores["pert"]
    rows = []
    for key in [k for k in scores if k.startswith("pert, L")]:
        p1 = scores[key]
        m = np.column_stack([c0, p0, p1, np.ones(n)])

        def stat(w: np.ndarray) -> np.ndarray:
            c, p, q = (w[:, i] / w[:, 3] for i in range(3))
            return np.stack([100 * (q - p), 100 * (q - c)], axis=1)

        ci = cluster_bootstrap_ci(linear_stat(m, stat), n, n_resamples=10_000, seed=0)
        broken = (c0 == 1) & (p0 == 0)
        rows.append(
            {
                "run": key,
                "em_pert": 100 * float(p1.mean()),
                "gain": ci.row(0),
                "vs_clean": ci.row(1),
                "recovered": int(((p1 == 1) & broken).sum()),
                "broken_by_perturbation": int(broken.sum()),
                "lost": int(((p1 == 0) & (p0 == 1)).sum()),
                "changed": sum(a != b for a, b in zip(texts[key], texts["pert"], strict=True)),
            }
        )
    result = {
        "n_examples": n,
        "em_clean": 100 * float(c0.mean()),
        "em_pert": 100 * float(p0.mean()),
        "clean_answers_identical_to_harness_base_run": same,
        "rows": rows,
    }
    if limit is not None:
        print(json.dumps(result, indent=1))
        return
    (HERE / "oracle_patch.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    write_md(result)


def _ci(v: list[float]) -> str:
    """``+x [+lo, +hi]``; the value alone where no example moved (no spread, no interval)."""
    if not all(np.isfinite(v)):
        return f"{v[0]:+.1f} (no example moved)"
    return f"{v[0]:+.1f} [{v[1]:+.1f}, {v[2]:+.1f}]"


def write_md(result: dict[str, Any]) -> None:
    n, same = result["n_examples"], result["clean_answers_identical_to_harness_base_run"]
    lines = [
        f"TriviaQA, Qwen2.5-Coder 1.5B, float32, {n} test examples: clean EM "
        f"{result['em_clean']:.1f}, perturbed EM {result['em_pert']:.1f} (this script's own "
        f"generations; {same}/{n} clean answers are the harness base run's, word for word).",
        "",
        "| perturbed prompt, edit | EM | gain vs perturbed [95 % BCa] | vs clean | "
        "recovered / broken by the perturbation | lost | generations changed |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['run']} | {r['em_pert']:.1f} | {_ci(r['gain'])} | {_ci(r['vs_clean'])} "
            f"| {r['recovered']} / {r['broken_by_perturbation']} | {r['lost']} "
            f"| {r['changed']}/{n} |"
        )
    (HERE / "oracle_patch.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:] == ["--render"]:  # the table again from oracle_patch.json, no model
        write_md(json.loads((HERE / "oracle_patch.json").read_text(encoding="utf-8")))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else None)
