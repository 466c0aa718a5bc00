"""The leaderboard's new columns (noise, certificates, model comparisons) and its HTML page,
opened in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_leaderboard import _write_run

from lm_eval_robust.cli import main as cli_main
from lm_eval_robust.report.leaderboard import build_leaderboard, within_noise
from lm_eval_robust.report.leaderboard_tables import to_markdown
from lm_eval_robust.values.pairing import label_runs

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def test_rows_carry_noise_certificates_and_comparisons(tmp_path: Path) -> None:
    runs = [_write_run(tmp_path, m, s) for m, s in (("weak", 0.3), ("strong", 2.5))]
    lb = build_leaderboard(label_runs(runs, None), n_resamples=300, n_splits=5, n_permutations=300)
    for m in lb.models:
        mean = lb.row(m, "format")
        assert mean is not None and mean.spread is not None
        assert 0 < mean.spread.p_value() <= 1 and mean.spread.null_mean() > 0
        # 4 perturbations per example: the exact certificate cannot certify, and says what K
        exact = mean.certs["exact"]
        assert not exact.available and "K >= 57" in exact.reason
        plug = mean.certs["plugin_c"]
        assert plug.available and plug.label == "plug-in p_C, K = 4"
        assert plug.split_min <= plug.rate <= plug.split_max
    md = to_markdown(lb)
    assert "n/a (K ≥ 57)" in md and "(K = 4)" in md
    assert "## Model comparisons" in md and "## Certificates" in md
    assert "## Best, worst and spread against noise" in md
    assert lb.comparison is not None
    worst = [p for p in lb.comparison.pairs if p.measure == "bac_worst"]
    assert len(worst) == 1 and worst[0].model_a == "weak" and worst[0].diff < 0
    # the hard format (f3) costs 1.5 of margin on 24 examples per task: above noise for the
    # weak model? not necessarily; the mark follows the p-value either way
    for r in lb.rows:
        if r.spread is not None and r.spread.as_dict()["spread_within_noise"]:
            assert within_noise(r)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("LM_EVAL_ROBUST_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium not found; install it: apt-get install chromium")
        pytest.skip("chromium not installed (apt-get install chromium); .ci/run installs it")
    runs = [_write_run(tmp_path, m, s) for m, s in (("model-a", 0.5), ("model-b", 2.0))]
    out = tmp_path / "lb"
    rc = cli_main(
        ["leaderboard", *map(str, runs), "-o", str(out), "--resamples", "200", "--splits", "3",
         "--permutations", "200", "--quiet"]
    )  # fmt: skip
    assert rc == 0
    page = out / "leaderboard.html"
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text  # self-contained
    assert text.count("data:image/png;base64,") == 2
    cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*cmd, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert 'data-ready="1"' in dom  # the page's script ran
    table = re.search(
        r'<table class="sortable leaderboard" id="lb-format">(.*?)</table>', dom, re.S
    )
    assert table is not None
    body = table.group(1).split("<tbody>")[1]
    assert body.count("<tr>") == 2 and "model-a" in body and "model-b" in body
    assert "n/a (K ≥ 57)" in body and "<svg" in body
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*cmd, "--window-size=1200,800", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "leaderboard.json").read_text())
    assert doc["comparison"]["pairs"] and doc["certificate_settings"]["n_splits"] == 3
