"""Prompts are byte-identical across processes and hash seeds, and stable against a digest.

If a change to the perturbations is deliberate, update ``tests/data/prompt_digests.json`` with
``python tests/test_determinism.py --update`` and say so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

DIGESTS = Path(__file__).parent / "data" / "prompt_digests.json"
CASES = [("ni065", "format"), ("ni065", "text"), ("ni1297", "format"), ("ni322", "text")]


def digests(data_dir: str) -> dict[str, str]:
    from lm_eval_robust.tasks.ni import NIConfig, build_docs

    cfg = NIConfig(n_perturbations=4, data_dir=data_dir)
    out = {}
    for task, kind in CASES:
        h = hashlib.sha256()
        for doc in build_docs(task, kind, "test", cfg):
            h.update(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode("utf-8"))
        out[f"{task}_{kind}"] = h.hexdigest()
    return out


def _in_subprocess(data_dir: Path, hashseed: str) -> dict[str, str]:
    here, data = str(Path(__file__).parent), str(data_dir)
    code = (
        f"import json, sys; sys.path.insert(0, {here!r})\n"
        "from test_determinism import digests\n"
        f"print(json.dumps(digests({data!r})))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_prompts_identical_across_processes(data_dir: Path) -> None:
    a = _in_subprocess(data_dir, "0")
    b = _in_subprocess(data_dir, "4242")
    assert a == b


def test_prompts_match_committed_digest(data_dir: Path) -> None:
    expected = json.loads(DIGESTS.read_text())
    assert digests(str(data_dir)) == expected, (
        "perturbed prompts changed; if deliberate run `python tests/test_determinism.py --update`"
    )


if __name__ == "__main__" and "--update" in sys.argv:
    root = Path(
        os.environ.get("LM_EVAL_ROBUST_DATA_DIR", Path(__file__).parents[2] / "shared/data")
    )
    DIGESTS.parent.mkdir(exist_ok=True)
    DIGESTS.write_text(json.dumps(digests(str(root)), indent=2) + "\n")
    print(f"wrote {DIGESTS}")
