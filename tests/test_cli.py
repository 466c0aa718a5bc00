"""The command line: perturb prints prompts side by side; errors are one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from lm_eval_robust.cli import main, show_invisible, side_by_side


def test_perturb_side_by_side(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["perturb", "--task", "ni065", "--kind", "format", "-n", "2", "--width", "120"]) == 0
    )
    out = capsys.readouterr().out
    assert out.count("clean ") >= 2 and "#1 format" in out and "#2 format" in out
    assert "Answer:" in out


def test_perturb_bad_task_is_one_line(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perturb", "--task", "ni999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lm-eval-robust: error: unknown task 'ni999'; known tasks: ni065")
    assert err.count("\n") == 1


def test_missing_data_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["perturb", "--task", "ni065", "--data-dir", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("lm-eval-robust: error: data directory") and err.count("\n") == 1


def test_show_invisible_and_columns() -> None:
    assert show_invisible("a\u200bb\nc") == "a◦b\nc"
    text = side_by_side("same\nleft", "same\nright", 40, ("a", "b"))
    assert "same" in text and "*" in text.splitlines()[-1]
