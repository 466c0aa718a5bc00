"""Sample-size planning (lm_eval_robust.report.plan): the formula by hand, the two-stage
bootstrap's standard error against the spread of many simulated studies, pairing, and the CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lm_eval_robust.cli import main as cli_main
from lm_eval_robust.report.plan import (
    PlanSettings,
    detectable_effect,
    examples_needed,
    plan_drop,
    plan_mean,
    plan_pair,
    to_markdown,
)
from lm_eval_robust.stats.bootstrap import bac_from_counts
from lm_eval_robust.stats.margins import MarginTable


def _table(gold: np.ndarray, clean_ok: np.ndarray, var_ok: np.ndarray) -> MarginTable:
    """Binary task: ``var_ok [E, K]`` says which perturbed variants are answered right."""

    def ll(g: int, ok: bool) -> list[float]:
        right = [0.0, 0.0]
        right[g if ok else 1 - g] = 1.0
        return right

    items = []
    for e, gg in enumerate(gold):
        g, ex = int(gg), f"{e:04d}"
        items.append({"example_id": ex, "pert_id": 0, "gold": g, "ll": ll(g, clean_ok[e])})
        for k, ok in enumerate(var_ok[e]):
            items.append({"example_id": ex, "pert_id": k + 1, "gold": g, "ll": ll(g, ok)})
    return MarginTable.from_items(items)


def _study(rng: np.random.Generator, e: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Examples with a clean accuracy of 0.8 and per-example perturbed rates from a Beta law."""
    gold = np.arange(e) % 2
    clean_ok = rng.random(e) < 0.8
    rate = rng.beta(3.0, 1.5, size=e)
    var_ok = rng.random((e, k)) < rate[:, None]
    return gold, clean_ok, var_ok


def _drop(gold: np.ndarray, clean_ok: np.ndarray, var_ok: np.ndarray) -> float:
    onehot = np.eye(2)[gold]
    k = var_ok.shape[1]
    pert = bac_from_counts(onehot.T @ var_ok.sum(1), k * onehot.sum(0))
    clean = bac_from_counts(onehot.T @ clean_ok, onehot.sum(0))
    return 100.0 * float(pert - clean)


def test_examples_needed_by_hand() -> None:
    z = PlanSettings(effect=1.0, alpha=0.05, power=0.8).z
    assert z == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    # E0 = 14, SE = 5 points, effect 1: 14 * (2.8016 * 5)^2 = 2747.1 -> 2748
    assert examples_needed(5.0, 14, 1.0, z) == math.ceil(14 * (z * 5.0) ** 2)
    assert examples_needed(5.0, 14, 1.0, z) == 2748
    assert examples_needed(5.0, 14, 10.0, z) == 28  # 100 x fewer for a 10 x larger effect
    assert examples_needed(0.0, 14, 1.0, z) == 0
    with pytest.raises(ValueError, match="not finite"):
        examples_needed(float("nan"), 14, 1.0, z)


def test_settings_refuse_bad_values() -> None:
    for bad in ({"effect": 0.0}, {"alpha": 1.5}, {"power": 0.0}, {"ks": (0,)}, {"n_resamples": 5}):
        with pytest.raises(ValueError):
            PlanSettings(**bad)  # type: ignore[arg-type]


def test_standard_error_matches_the_spread_of_simulated_studies() -> None:
    """The planner's SE from one pilot of E examples x K variants is close to the standard
    deviation of delta_drop over many independent studies of the same size."""
    rng = np.random.default_rng(7)
    e, k = 120, 20
    truth = np.std([_drop(*_study(rng, e, k)) for _ in range(600)], ddof=1)
    pilot = _table(*_study(np.random.default_rng(11), e, k))
    row = plan_drop(pilot, "sim", PlanSettings(ks=(k,), n_resamples=3000, seed=1))
    assert row.n_examples == e and row.k_pilot == k
    assert row.se[k] == pytest.approx(truth, rel=0.2)


def test_mean_row_error_matches_the_spread_of_simulated_mean_drops() -> None:
    """The mean over tasks (a leaderboard's mean row): its SE at E examples per task, from one
    pilot per task of a different size, is close to the standard deviation of the mean drop over
    many independent studies of both tasks at E examples each; it needs fewer examples per task
    than either task alone, and a task with no variance adds none."""
    rng = np.random.default_rng(8)
    e, k = 60, 4
    truth = np.std(
        [(_drop(*_study(rng, e, k)) + _drop(*_study(rng, e, k))) / 2 for _ in range(600)], ddof=1
    )
    settings = PlanSettings(ks=(k,), n_resamples=3000, seed=1, effect=5.0, budget=300)
    rows = [
        plan_drop(_table(*_study(np.random.default_rng(s), n, k)), f"t{s}", settings)
        for s, n in ((21, 40), (22, 80))
    ]
    mean = plan_mean(rows, "mean over 2 tasks (format)", settings)
    assert mean.n_tasks == 2 and mean.n_examples == 60
    assert mean.estimate == pytest.approx((rows[0].estimate + rows[1].estimate) / 2)
    assert mean.se[k] == pytest.approx(truth, rel=0.2)
    assert mean.needed[k] < min(r.needed[k] for r in rows)
    assert mean.detectable is not None
    assert mean.detectable[k] == pytest.approx(settings.z * mean.se[k] * math.sqrt(60 / 60))
    flat = plan_drop(
        _table(np.arange(10) % 2, np.ones(10, bool), np.ones((10, k), bool)), "flat", settings
    )
    alone = plan_mean([rows[0], flat], "m", settings)
    assert alone.se[k] == pytest.approx(rows[0].se[k] * math.sqrt(40 / 25) / 2)
    text = to_markdown([*rows, mean], settings, "pilot")
    assert "| mean over 2 tasks (format) | delta_drop |" in text and "examples *per task*" in text
    with pytest.raises(ValueError, match="at least two tasks"):
        plan_mean(rows[:1], "m", settings)


def test_more_perturbations_lower_the_error_but_not_below_the_between_example_part() -> None:
    pilot = _table(*_study(np.random.default_rng(3), 60, 10))
    row = plan_drop(pilot, "sim", PlanSettings(ks=(2, 10, 200, 2000), n_resamples=3000))
    se = [row.se[k] for k in (2, 10, 200, 2000)]
    assert se[0] > se[1] > se[2] >= se[3] - 0.05
    assert se[3] > 0.5 * se[1]  # between-example variance stays
    assert row.needed[2] > row.needed[2000]


def test_no_variance_cannot_be_planned() -> None:
    gold = np.arange(10) % 2
    table = _table(gold, np.ones(10, bool), np.ones((10, 5), bool))
    row = plan_drop(table, "flat", PlanSettings(ks=(5,)))
    assert row.estimate == 0.0 and row.se[5] == 0.0 and row.needed[5] == 0
    text = to_markdown([row], PlanSettings(ks=(5,)))
    assert "| flat | delta_drop | +0.0 | 10 × 5 | 0.00 | – |" in text
    assert "no variance at all" in text


def test_pair_keeps_the_pairing() -> None:
    rng = np.random.default_rng(5)
    gold, clean_ok, var_ok = _study(rng, 40, 10)
    base = _table(gold, clean_ok, var_ok)
    same = plan_pair(base, base, "t", PlanSettings(ks=(10,)))
    assert same.estimate == 0.0 and same.se[10] == 0.0 and same.needed[10] == 0
    # the other run fixes one wrong variant in four: a positive, paired effect
    fixed = var_ok | ((rng.random(var_ok.shape) < 0.25) & ~var_ok)
    other = _table(gold, clean_ok, fixed)
    row = plan_pair(base, other, "t", PlanSettings(ks=(10,)))
    onehot = np.eye(2)[gold]
    want = 100.0 * float(
        bac_from_counts(onehot.T @ fixed.sum(1), 10 * onehot.sum(0))
        - bac_from_counts(onehot.T @ var_ok.sum(1), 10 * onehot.sum(0))
    )
    assert row.estimate == pytest.approx(want)
    # paired: far tighter than the drop of either run alone
    assert 0 < row.se[10] < plan_drop(base, "t", PlanSettings(ks=(10,))).se[10]
    shorter = _table(gold[:-1], clean_ok[:-1], var_ok[:-1])
    with pytest.raises(ValueError, match="same variants"):
        plan_pair(base, shorter, "t", PlanSettings(ks=(10,)))


def test_markdown_names_the_rule() -> None:
    table = _table(*_study(np.random.default_rng(1), 20, 5))
    settings = PlanSettings(ks=(5, 50))
    text = to_markdown([plan_drop(table, "sim", settings)], settings, "pilot")
    assert "examples needed, K=50" in text and "| sim | delta_drop |" in text
    assert "power 0.8" in text


def test_cli_refuses_bad_arguments(capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert cli_main(["plan", str(tmp_path), "--k", "20,x"]) == 2
    assert "--k takes comma-separated integers" in capsys.readouterr().err
    assert cli_main(["plan", "a", "b", "c"]) == 2
    assert "one run or a pair" in capsys.readouterr().err
    assert cli_main(["plan", str(tmp_path), "--effect", "0"]) == 2
    assert "effect must be positive" in capsys.readouterr().err
    assert cli_main(["plan", str(tmp_path), "--budget", "3"]) == 2
    assert "cannot hold 2 examples at K = 20; give at least 42" in capsys.readouterr().err


def test_cli_on_run_folders(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from test_report import _runs

    base, deb = _runs(tmp_path)
    out = tmp_path / "plan.md"
    assert cli_main(["plan", str(base), "--k", "5,50", "--resamples", "500", "-o", str(out)]) == 0
    text = out.read_text()
    assert "| ni065_format_pert | delta_drop |" in text and "| ni220_format_pert |" in text
    assert "| mean over 2 tasks (format) | delta_drop |" in text  # the two tasks' mean row
    capsys.readouterr()
    assert cli_main(["plan", str(base), str(deb), "--tasks", "ni220_format_pert"]) == 0
    printed = capsys.readouterr().out
    assert "| ni220_format_pert | delta_pert |" in printed and "ni065" not in printed


def test_budget_turns_the_question_round() -> None:
    """At a budget, each K's detectable effect is z·SE·√(E0/E) at E = budget/(1+K); the size to
    run is the K with the smallest one, and at the examples ``needed`` for an effect the
    detectable effect is at most that effect."""
    table = _table(*_study(np.random.default_rng(5), 40, 10))
    settings = PlanSettings(ks=(1, 3, 10, 50), n_resamples=1500, budget=600)
    row = plan_drop(table, "sim", settings)
    assert row.detectable is not None
    for k in settings.ks:
        want = settings.z * row.se[k] * math.sqrt(40 / (600 // (1 + k)))
        assert row.detectable[k] == pytest.approx(want)
        assert detectable_effect(row.se[k], 40, row.needed[k], settings.z) <= settings.effect
    k, e, eff = row.best_at_budget(600)
    assert eff == min(row.detectable.values()) and e == 600 // (1 + k)
    # 50 perturbations leave 11 examples: between-example noise makes it the worst choice
    assert row.detectable[50] > eff
    text = to_markdown([row], settings, "pilot")
    assert "## At a budget of 600 prompts per task" in text and f"| {e} × {k} |" in text
    plain = PlanSettings(ks=(1, 3, 10, 50), n_resamples=1500)
    assert "budget" not in to_markdown([plan_drop(table, "sim", plain)], plain)
    with pytest.raises(ValueError, match="cannot hold 2 examples"):
        PlanSettings(ks=(5,), budget=11)
    with pytest.raises(ValueError, match="made without a budget"):
        plan_drop(table, "sim", plain).best_at_budget(600)


def test_cli_plans_one_run_whose_docs_have_different_choices_and_leaves_out_a_pair(  # type: ignore[no-untyped-def]
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run: a task whose docs have different numbers of choices (BIG-bench's
    date_understanding) is planned on the leaderboard's BAC, its pilot drop the same number.
    Two runs: its answers cannot be paired label by label, so it is left out with a line."""
    import gzip
    import json

    from test_report import _runs

    from lm_eval_robust.stats.robustness import BOOTSTRAP_STATS, RobustTable, statistics

    base, other = _runs(tmp_path)
    first = None
    for run in (base, other):
        (path,) = run.rglob("samples_ni065_format_pert_*.jsonl*")
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            lines = [json.loads(x) for x in fh]
        first = first or lines[0]["doc"].get("example_id")  # the same example in both runs
        for s in lines:
            if s["doc"].get("example_id") == first:
                for v in s.values():
                    if isinstance(v, dict) and isinstance(v.get("ll"), list):
                        v["ll"] = [*v["ll"], -50.0]
        with opener(path, "wt", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(s) + "\n" for s in lines))
    assert cli_main(["plan", str(base), "--k", "5", "--resamples", "200"]) == 0
    one = capsys.readouterr()
    assert "left out" not in one.err
    row = next(x for x in one.out.splitlines() if x.startswith("| ni065_format_pert |"))
    items = [s["bac_pert"] for s in lines]  # the other run's file: its own table
    t = RobustTable.from_items(items)
    drop = statistics(t, np.ones((1, t.n_examples)))[0][BOOTSTRAP_STATS.index("delta_drop")]
    assert cli_main(["plan", str(other), "--k", "5", "--resamples", "200"]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines() if "| ni065_format_pert |" in x)
    assert row.split("|")[3].strip() == f"{100 * drop:+.1f}"
    assert cli_main(["plan", str(base), str(other), "--k", "5", "--resamples", "200"]) == 0
    pair = capsys.readouterr()
    assert "left out ni065_format_pert: their docs have different numbers" in pair.err
    assert "| ni220_format_pert |" in pair.out and "| ni065_format_pert |" not in pair.out


def test_a_crossed_pilot_is_planned_for_the_nested_design(  # type: ignore[no-untyped-def]
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plan treats an example's K variants as independent draws (nested); a pilot run crossed
    gets one line and a note saying to run the chosen size nested, and a nested one neither."""
    import json

    from test_report import _runs

    base, _ = _runs(tmp_path)
    assert cli_main(["plan", str(base), "--k", "1,2", "--resamples", "200"]) == 0
    nested = capsys.readouterr()
    assert "crossed" not in nested.out + nested.err
    (path,) = base.rglob("results_*.json")
    results = json.loads(path.read_text())
    for cfg in results["configs"].values():
        cfg.setdefault("metadata", {})["design"] = "crossed"
    path.write_text(json.dumps(results))
    assert cli_main(["plan", str(base), "--k", "1,2", "--resamples", "200"]) == 0
    crossed = capsys.readouterr()
    assert "the pilot is crossed (2 of 2 tasks)" in crossed.err
    assert "Design: the pilot is crossed" in crossed.out and '"design": "nested"' in crossed.out
