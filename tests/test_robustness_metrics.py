"""Leaderboard measures (worst-case BAC, consistency, per-variant spread), the crossed design, and
the clustered standard errors our metrics write into lm-eval's results."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lm_eval_robust.base.harness_names import short_metric
from lm_eval_robust.stats import classification, robustness
from lm_eval_robust.stats.robustness import BOOTSTRAP_STATS, RobustTable, replicates
from lm_eval_robust.tasks.ni import build_docs
from lm_eval_robust.tasks.settings import NIConfig, TaskConfigError


def _item(ex: str, pid: int, gold: int, ll: list[float], variant: str = "f") -> dict[str, Any]:
    return {
        "task": "t",
        "example_id": ex,
        "pert_id": pid,
        "gold": gold,
        "pred": int(np.argmax(ll)),
        "ll": ll,
        "variant": "clean" if pid == 0 else variant,
    }


RIGHT = {0: [0.0, -1.0], 1: [-1.0, 0.0]}
WRONG = {0: [-1.0, 0.0], 1: [0.0, -1.0]}


def _four_examples() -> list[dict[str, Any]]:
    """e0 (gold 0) and e1 (gold 1) always right; e2 (gold 0) wrong in format B only; e3 (gold 1)
    wrong when clean, right when perturbed."""
    items = []
    for ex, gold in (("e0", 0), ("e1", 1), ("e2", 0), ("e3", 1)):
        items.append(_item(ex, 0, gold, (WRONG if ex == "e3" else RIGHT)[gold]))
        for pid, fmt in ((1, "A"), (2, "B")):
            bad = ex == "e2" and fmt == "B"
            items.append(_item(ex, pid, gold, (WRONG if bad else RIGHT)[gold], fmt))
    return items


def test_worst_case_consistency_and_spread_by_hand() -> None:
    items = _four_examples()
    # worst case: e0, e1 right everywhere; e2 fails B; e3 fails clean -> recall 1/2 per class
    assert robustness.bac_worst(items) == pytest.approx(0.5)
    # consistency: 8 perturbed docs; e2/B differs from e2's clean prediction, e3's two differ
    assert robustness.consistency(items) == pytest.approx(5 / 8)
    # format A: all right (1.0); format B: class 0 recall 1/2, class 1 recall 1 -> 0.75
    assert robustness.variant_bac(items) == pytest.approx({"A": 1.0, "B": 0.75})
    assert robustness.fmt_best(items) == pytest.approx(1.0)
    assert robustness.fmt_worst(items) == pytest.approx(0.75)
    assert robustness.fmt_median(items) == pytest.approx(0.875)
    assert robustness.fmt_spread(items) == pytest.approx(0.25)


def test_ties_count_one_half_in_worst_case_and_consistency() -> None:
    items = [
        _item("a", 0, 0, [0.0, 0.0]),
        _item("a", 1, 0, [0.0, -1.0], "A"),
        _item("b", 0, 1, [-1.0, 0.0]),
        _item("b", 1, 1, [-1.0, 0.0], "A"),
    ]
    # a: clean tie -> credit 1/2, worst 1/2; b: 1 -> BAC (0.5 + 1) / 2
    assert robustness.bac_worst(items) == pytest.approx(0.75)
    # a: clean shares (1/2, 1/2) agree with (1, 0) half the time; b agrees
    assert robustness.consistency(items) == pytest.approx(0.75)


def test_shared_statistics_match_the_classification_metrics() -> None:
    rng = np.random.default_rng(3)
    items = []
    for e in range(30):
        gold = int(rng.integers(0, 3))
        for pid in range(6):
            ll = [float(x) for x in rng.normal(size=3)]
            items.append(_item(f"e{e}", pid, gold, ll, f"f{(pid + e) % 7}"))
    table = RobustTable.from_items(items)
    est = dict(zip(BOOTSTRAP_STATS, robustness.statistics(table, np.ones((1, 30)))[0], strict=True))
    for name in ("bac_clean", "bac_pert", "delta_drop", "acc_clean", "acc_pert", "tie_share"):
        assert est[name] == pytest.approx(getattr(classification, name)(items)), name
    assert est["maj_share_pert"] == pytest.approx(classification.maj_share_pert(items))


def test_variant_without_every_class_is_left_out() -> None:
    items = _four_examples()
    # format C only on a class-0 example: its BAC would be one class's recall
    items.append(_item("e0", 3, 0, RIGHT[0], "C"))
    items.append(_item("e1", 3, 1, RIGHT[1], "A"))
    items.append(_item("e2", 3, 0, RIGHT[0], "A"))
    items.append(_item("e3", 3, 1, RIGHT[1], "A"))
    assert "C" not in robustness.variant_bac(items)


def test_bootstrap_is_clustered_seeded_and_shrinks_with_more_examples() -> None:
    def items_for(n: int) -> list[dict[str, Any]]:
        rng = np.random.default_rng(7)
        out = []
        for e in range(n):
            gold = e % 2
            for pid in range(5):
                ll = [float(x) for x in rng.normal(size=2) + (0.6 if gold else -0.6) * np.r_[-1, 1]]
                out.append(_item(f"e{e}", pid, gold, ll, f"f{pid}"))
        return out

    small = replicates(RobustTable.from_items(items_for(20)), 400, seed=0)
    again = replicates(RobustTable.from_items(items_for(20)), 400, seed=0)
    big = replicates(RobustTable.from_items(items_for(320)), 400, seed=0)
    col = BOOTSTRAP_STATS.index("bac_pert")
    assert np.array_equal(small.boot, again.boot)
    assert big.stderr()[col] < small.stderr()[col] / 2  # ~ 1/sqrt(16) of it
    assert small.jack.shape == (20, len(BOOTSTRAP_STATS))


def _docs(design: str, kind: str, k: int = 4) -> list[dict[str, Any]]:
    md = {"n_examples": 20, "n_perturbations": k, "design": design}
    return build_docs("ni065", kind, "test", NIConfig.from_metadata(md))


def test_crossed_design_gives_every_example_the_same_formats(data_dir: Path) -> None:
    crossed = _docs("crossed", "format")
    by_round: dict[int, set[str]] = {}
    for d in crossed:
        by_round.setdefault(int(d["pert_id"]), set()).add(d["format_id"])
    assert all(len(f) == 1 for f in by_round.values())
    assert len({next(iter(by_round[p])) for p in range(1, 5)}) == 4  # four distinct formats
    nested = _docs("nested", "format")
    assert any(len({d["format_id"] for d in nested if d["pert_id"] == p}) > 1 for p in range(1, 5))
    # the clean prompts do not depend on the design
    assert [d["prompt"] for d in crossed if d["pert_id"] == 0] == [
        d["prompt"] for d in nested if d["pert_id"] == 0
    ]


def test_crossed_text_design_rotates_the_kinds(data_dir: Path) -> None:
    docs = _docs("crossed", "text", k=8)
    kinds = NIConfig().text_kinds
    for d in docs:
        if d["pert_id"]:
            assert d["pert_kind"] == kinds[(d["pert_id"] - 1) % len(kinds)]
    counts = Counter(d["pert_kind"] for d in docs if d["pert_id"])
    assert len(set(counts.values())) == 1


def test_crossed_design_refuses_more_formats_than_the_split_has(data_dir: Path) -> None:
    with pytest.raises(TaskConfigError, match=r"design=crossed.*lower n_perturbations"):
        build_docs(
            "ni065",
            "format",
            "test",
            NIConfig.from_metadata(
                {"n_examples": 20, "n_perturbations": 50, "format_pool": 20, "design": "crossed"}
            ),
        )
    with pytest.raises(TaskConfigError, match=r"unknown design 'crosed'.*did you mean 'crossed'"):
        NIConfig.from_metadata({"design": "crosed"})


def test_harness_results_carry_clustered_stderrs(tiny_model_dir: Path, data_dir: Path) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    from lm_eval_robust.harness._plugin import register, task_dir

    register()
    md = {"n_examples": 12, "n_perturbations": 3, "design": "crossed"}
    tm = TaskManager(include_path=task_dir(), include_defaults=False, metadata=md)
    out = lm_eval.simple_evaluate(
        model="debiased_hf",
        model_args={"pretrained": str(tiny_model_dir), "device": "cpu"},
        tasks=["ni1284_format_pert"],
        task_manager=tm,
        batch_size=4,
        log_samples=True,
        bootstrap_iters=200,
    )
    # the config as hf writes it: its dtype spelling, and the prompts per forward really used
    assert out["config"]["model_dtype"] == "torch.float32"
    assert out["config"]["batch_sizes"] == [4]
    res = out["results"]["ni1284_format_pert"]
    res = {short_metric(k): v for k, v in res.items()}  # robust_bac_pert,none -> bac_pert
    for name in ("bac_pert", "delta_drop", "bac_worst", "consistency", "fmt_spread"):
        assert name in res, name
    for name in ("bac_clean", "bac_pert", "consistency"):
        se = res[f"{name}_stderr"]
        assert isinstance(se, float) and 0 < se < 0.5, (name, se)
    assert res["pop_cert_h_stderr"] == "N/A"  # already a confidence bound
    items = [s["robust_bac_pert"] for s in out["samples"]["ni1284_format_pert"]]
    assert res["bac_worst"] == pytest.approx(robustness.bac_worst(items))
    assert res["bac_worst"] <= min(res["bac_clean"], res["bac_pert"]) + 1e-12
    assert all(math.isfinite(res[f"fmt_{s}"]) for s in ("best", "worst", "median"))


def test_generation_stderr_is_clustered_by_example() -> None:
    from lm_eval_robust.stats.stderr import generation_replicates, metric_of, stderr_for

    def items(n_pert: int) -> list[dict[str, Any]]:
        out = []
        for e in range(20):
            for pid in range(n_pert + 1):
                # every prompt of an example scores alike: more prompts add no information
                out.append({"example_id": f"e{e}", "pert_id": pid, "scores": {"em": float(e % 2)}})
        return out

    few, many = stderr_for("em_pert", 400)(items(2)), stderr_for("em_pert", 400)(items(10))
    assert isinstance(few, float) and few == pytest.approx(many, rel=0.2)
    assert few == pytest.approx(100 * 0.5 / np.sqrt(20), rel=0.25)  # SE of a mean of 20 0/1s
    boot = generation_replicates(items(3), "em", 200)
    assert np.allclose(boot[:, 2], 0.0)  # perturbed == clean in every resample
    from lm_eval_robust.tasks.generation import metrics as gen

    assert metric_of(gen.em_drop) == "em_drop" and metric_of(gen.rougeL_clean) == "rougeL_clean"


def test_other_engines_model_args_pass_the_metadata_check() -> None:
    # the harness merges --model_args into every task's metadata: local-completions' and vLLM's
    # args must not be refused as misspelt settings, while a real typo still is
    md = {"model": "m", "base_url": "http://x/v1/completions", "tokenizer_backend": "huggingface"}
    md |= {"num_concurrent": 1, "max_retries": 3, "enforce_eager": True, "n_examples": 12}
    md |= {"gpu_memory_utilization": 0.3, "max_model_len": 2048}
    assert NIConfig.from_metadata(md).n_examples == 12
    with pytest.raises(TaskConfigError, match="unknown setting 'n_exampels'"):
        NIConfig.from_metadata({**md, "n_exampels": 12})


@pytest.mark.slow
def test_leaderboard_group_row_averages_the_finite_sample_certificate(
    tiny_model_dir: Path, data_dir: Path
) -> None:
    """The preset's group row: means over its tasks, the certified share the finite-sample one,
    NaN (n/a) at the preset's K = 8 rather than a plug-in number without its guarantee."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from lm_eval_robust.harness._plugin import register, task_dir

    register()
    tm = TaskManager(include_path=task_dir(), include_defaults=False)
    out = lm_eval.simple_evaluate(
        model="debiased_hf",
        model_args={"pretrained": str(tiny_model_dir), "device": "cpu"},
        tasks=["ni_leaderboard_format"],
        task_manager=tm,
        batch_size=8,
        limit=18,
        bootstrap_iters=100,
    )
    group = {short_metric(k): v for k, v in out["groups"]["ni_leaderboard_format"].items()}
    assert math.isnan(group["p_cert_exact"])
    assert "p_cert_h" not in group
    tasks = [t for t in out["results"] if t.endswith("_format_lb")]
    assert len(tasks) == 10
    per_task = [out["results"][t]["robust_bac_clean,none"] for t in tasks]
    assert group["bac_clean"] == pytest.approx(float(np.mean(per_task)))
