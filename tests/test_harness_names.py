"""One list of names (lm_eval_robust.base.harness_names): the YAMLs, the registration and the entry
points agree with it, our names stay in their namespace, and old runs' names still read."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from lm_eval_robust.base import harness_names as hn

REPO = Path(__file__).resolve().parents[1]


def _yaml_metrics() -> dict[str, tuple[str, bool]]:
    """metric -> (aggregation path, higher_is_better) over every task YAML."""
    out: dict[str, tuple[str, bool]] = {}
    pattern = re.compile(
        r"- metric: (\w+)\n\s+aggregation: !function ([\w.]+)\n\s+higher_is_better: (\w+)"
    )
    for path in sorted((REPO / "task_yamls").iterdir()):
        for name, agg, hib in pattern.findall(path.read_text(encoding="utf-8")):
            assert out.get(name, (agg, hib == "true")) == (agg, hib == "true"), (path, name)
            out[name] = (agg, hib == "true")
    return out


def test_the_list_has_36_metrics_each_once() -> None:
    names = [m.name for m in hn.METRICS]
    assert len(names) == len(set(names)) == 36
    assert all(m.harness_name == "robust_" + m.name for m in hn.METRICS)


def test_generated_files_are_current() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        gen = importlib.import_module("gen_harness_names")
    finally:
        sys.path.remove(str(REPO / "scripts"))
    assert gen.drifted(REPO) == [], "run: python scripts/gen_harness_names.py"


def test_yamls_registration_and_entry_points_agree_with_the_list() -> None:
    from lm_eval_robust.harness import harness_metrics

    listed = {m.harness_name: (m.aggregation_path, m.higher_is_better) for m in hn.METRICS}
    assert _yaml_metrics() == listed

    registered = {m.name: m.higher_is_better for m in harness_metrics.METRICS}
    assert registered == {name: hib for name, (_, hib) in listed.items()}

    entry = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "entry-points"
    ]
    assert set(entry["lm_eval.metrics"]) == set(listed)
    assert set(entry["lm_eval.aggregations"]) == {m.aggregation_name for m in hn.METRICS}
    for m in hn.METRICS:
        # each entry point names the decorated object itself (module:__name__)
        for group, name in (
            ("lm_eval.metrics", m.harness_name),
            ("lm_eval.aggregations", m.aggregation_name),
        ):
            module, _, attr = entry[group][name].partition(":")
            obj = getattr(importlib.import_module(module), attr)
            assert f"{obj.__module__}:{obj.__name__}" == entry[group][name]


def test_registration_uses_the_aggregation_the_yaml_names() -> None:
    from lm_eval.api.registry import get_metric, get_metric_aggregation, is_higher_better

    from lm_eval_robust.harness import harness_metrics

    for m in hn.METRICS:
        real = getattr(importlib.import_module(m.module), m.name)
        found = next(h for h in harness_metrics.METRICS if h.name == m.harness_name)
        assert found.aggregate is real
        metric = get_metric(m.harness_name)
        item = {"row": 1}
        assert metric(item) is item
        assert get_metric_aggregation(m.harness_name).__name__ == m.aggregation_name
        assert is_higher_better(m.harness_name) is m.higher_is_better


def test_no_name_of_ours_is_a_builtin_and_the_hook_registers_none() -> None:
    code = (
        "import json, lm_eval.api.metrics\n"
        "from lm_eval.api.registry import aggregation_registry, metric_registry\n"
        "print(json.dumps(sorted(set(metric_registry) | set(aggregation_registry))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    builtin = set(json.loads(out.stdout.strip().splitlines()[-1]))
    ours = {m.harness_name for m in hn.METRICS} | {m.aggregation_name for m in hn.METRICS}
    # the start-up hook adds nothing to lm-eval's registries (lm-eval's own tests check that
    # every registered metric is a built-in), and no built-in carries our namespace
    assert not ours & builtin
    assert not any(n.startswith(hn.NAMESPACE) for n in builtin)
    assert all(n.startswith(hn.NAMESPACE) for n in ours)


@pytest.mark.parametrize(
    ("key", "short"),
    [
        ("robust_bac_clean,none", "bac_clean"),
        ("bac_clean,none", "bac_clean"),  # a run made before the namespace
        ("robust_em_drop_stderr,none", "em_drop_stderr"),
        ("em_drop_stderr,none", "em_drop_stderr"),
        ("acc,none", "acc"),  # a built-in: unchanged
        ("alias", "alias"),
    ],
)
def test_old_and_new_metric_keys_read_alike(key: str, short: str) -> None:
    assert hn.short_metric(key) == short


def test_generation_task_names_are_namespaced_and_old_ones_read() -> None:
    assert len(hn.GEN_TASK_NAMES) == 16
    assert hn.gen_task_name("gsm8k", "text") == "robust_gsm8k_text_pert"
    assert hn.gen_task_name("nq_open", "clean", "train") == "robust_nq_open_clean_train"
    for name in hn.GEN_TASK_NAMES:
        assert hn.OLD_NAMES[hn.short_task(name)] == name
    assert hn.short_task("gsm8k_text_pert") == "gsm8k_text_pert"
    assert hn.short_task("ni065_format_pert") == "ni065_format_pert"
    on_disk = {p.stem for p in (REPO / "task_yamls").glob("*.yaml")}
    assert set(hn.GEN_TASK_NAMES) <= on_disk
    assert not {n for n in on_disk if n.startswith(("gsm8k", "nq_open", "triviaqa", "xsum"))}
