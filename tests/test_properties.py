"""Property-based tests of perturbed prompts at the task level (hypothesis).

For any seed, kind and rate: the prompt is a valid string, the answer cue, the option markers and
the label words are unchanged, zero-width perturbations are undone by removing zero-width
characters, and format perturbations only ever render valid formats.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lm_eval_robust.tasks.ni import NIConfig, build_prompt, format_splits, load_task_data
from lm_eval_robust.tasks.perturb.format import is_valid, render
from lm_eval_robust.tasks.perturb.segments import join
from lm_eval_robust.tasks.perturb.text import TextPerturbConfig, perturb_segments, remove_zero_width
from lm_eval_robust.tasks.specs import TASK_ORDER, get_spec

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def task_data(data_dir: Path) -> dict:
    cfg = NIConfig(n_examples=20, n_perturbations=2, data_dir=str(data_dir))
    return {t: load_task_data(get_spec(t), cfg) for t in TASK_ORDER}


@SETTINGS
@given(
    task=st.sampled_from(TASK_ORDER),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["zero_width", "confusable", "markup", "typo"]),
    rate=st.floats(0.01, 1.0),
    scope=st.sampled_from(["all", "query"]),
)
def test_text_perturbation_keeps_protected_spans(task_data, task, seed, kind, rate, scope) -> None:
    data = task_data[task]
    example = data.splits["test"][seed % len(data.splits["test"])]
    segs, _ = build_prompt(data, data.spec.clean_format, example)
    cfg = TextPerturbConfig(kinds=(kind,), rate=rate, scope=scope)
    new, used = perturb_segments(segs, cfg, random.Random(seed))
    assert used == kind and len(new) == len(segs)
    text = join(new)
    text.encode("utf-8")  # a valid string
    for old, cur in zip(segs, new, strict=True):
        if old.protected:  # label words, option markers, the answer cue
            assert cur.text == old.text
    assert segs[-1].protected and segs[-1].role.endswith("cue")  # the prompt ends in the cue
    assert text.endswith(segs[-1].text)
    if kind == "zero_width":
        assert remove_zero_width(text) == join(segs)


@SETTINGS
@given(task=st.sampled_from(TASK_ORDER), pick=st.integers(0, 10_000))
def test_format_perturbations_render_valid_formats(task_data, task, pick) -> None:
    data = task_data[task]
    spec = data.spec
    pools = format_splits(spec.short, 60, 1234)
    fmt = pools["test"][pick % len(pools["test"])]
    assert is_valid(spec.structure, fmt)
    example = data.splits["test"][pick % len(data.splits["test"])]
    segs, labels = build_prompt(data, fmt, example)
    query = render(spec.structure, fmt, example.values, None)
    assert join(segs).endswith(join(query))
    cue = [s for s in query if s.role == "cue"]
    assert len(cue) == 1 and join(segs).endswith(cue[0].text)
    assert len(set(labels)) == len(labels)


def test_same_fit_twice_same_file(tmp_path: Path) -> None:
    import numpy as np

    from lm_eval_robust.scoring.correction import Correction, save
    from lm_eval_robust.scoring.fit.ridge import fit_ridge

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 16))
    f = x @ rng.normal(size=(16, 2)) + 0.1 * rng.normal(size=(200, 2))
    paths = []
    for i in range(2):
        fit = fit_ridge(x, f, x[:20], lam=0.5, alpha=0.01)
        corr = Correction.from_ridge(
            fit,
            label_token_ids=[5, 6],
            labels=["a", "b"],
            task="ni322_format_pert",
            fingerprint={"architecture": "X", "hidden_size": 16},
        )
        paths.append(save(corr, tmp_path / f"c{i}.safetensors"))
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    assert len(digests) == 1
