"""What the command line says: one flag spelling, help with defaults and an example, one-line
errors for an unknown command or a misspelt task, before any model loads."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

from lm_eval_robust.cli import COMMANDS, main

PARSED = [
    "perturb",
    "fit",
    "export",
    "replay",
    "report",
    "leaderboard",
    "plan",
    "select",
    "lora",
    "wrap",
]


def _parser(name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = importlib.import_module(
        f"lm_eval_robust.cli.{name}"
    ).build_parser()
    return parser


def _help(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main([name, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def test_every_command_is_dispatched() -> None:
    assert set(COMMANDS) == {"run", *PARSED}


def test_top_level_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "usage: lm-eval-robust <command> [options]"
    assert "`" not in out
    for name in COMMANDS:
        assert f"\n  {name} " in out
    assert "example:\n  lm-eval-robust run --model debiased_hf" in out


def test_unknown_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "lm-eval-robust: error: unknown command 'frobnicate'; did you mean 'fit'? (commands: "
        "run, perturb, fit, export, replay, report, leaderboard, plan, select, lora, wrap; see "
        "lm-eval-robust "
        "--help)\n"
    )
    assert main(["reprot"]) == 2
    assert "did you mean 'report'?" in capsys.readouterr().err


def test_run_help_names_this_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        "usage: lm-eval-robust run --model <model> --tasks <task>[,<task>] --model_args "
        "<k=v,k=v> [options]"
    )
    assert "lm-eval run" not in out
    assert "(default: 1)" in out  # --batch_size, the harness's own default
    assert "example:\n  lm-eval-robust run --model debiased_hf" in out


@pytest.mark.parametrize("name", PARSED)
def test_help_shows_usage_defaults_and_an_example(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _help(name, capsys)
    assert out.startswith(f"usage: lm-eval-robust {name} ")
    assert "(default: " in out
    assert f"example:\n  lm-eval-robust {name} " in out
    assert "the dash spelling (--model-args) is accepted too" in " ".join(out.split())


@pytest.mark.parametrize("name", PARSED)
def test_one_spelling_with_the_dash_one_accepted(name: str) -> None:
    from lm_eval_robust.cli.args import normalise_flags

    parser = _parser(name)
    flags = parser._option_string_actions
    for flag in (f for f in flags if f.startswith("--")):
        assert "-" not in flag[2:], f"{name} spells {flag}; use {flag.replace('-', '_')}"
        dashed = "--" + flag[2:].replace("_", "-")
        assert normalise_flags([dashed, "x"], flags) == [flag, "x"]
        assert normalise_flags([f"{dashed}=x"], flags) == [f"{flag}=x"]


def test_dash_spelling_parses(tmp_path: Path) -> None:
    argv = ["--task", "t", "--model-args", "dtype=float32", "--batch-size", "4", "--any-split"]
    args = _parser("fit").parse_args([*argv, "--features-dir", str(tmp_path), "-o", "x"])
    assert (args.model_args, args.batch_size, args.any_split) == ("dtype=float32", "4", True)
    assert args.features_dir == str(tmp_path)


def test_run_takes_the_dash_spelling_too() -> None:
    from lm_eval._cli import HarnessCLI

    from lm_eval_robust.cli.args import normalise_flags
    from lm_eval_robust.cli.run import harness_run_parser

    run = harness_run_parser(HarnessCLI())
    argv = ["--model-args", "pretrained=x", "--batch-size=4", "--tasks", "a-b", "--", "--x-y"]
    assert normalise_flags(argv, run._option_string_actions) == [
        "--model_args",
        "pretrained=x",
        "--batch_size=4",
        "--tasks",
        "a-b",
        "--",
        "--x-y",
    ]


def test_fit_same_flags_as_select() -> None:
    fit = _parser("fit")._option_string_actions
    select = _parser("select")._option_string_actions
    lora = _parser("lora")._option_string_actions
    for flag in ("--model_args", "--batch_size", "--metadata", "--pretrained"):
        assert flag in fit and flag in lora
    for flag in ("--model_args", "--batch_size", "--metadata", "--pretrained"):
        assert flag in select


def _no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model or running the harness fails the test."""
    import lm_eval_robust.cli.fit as fit
    import lm_eval_robust.scoring.model as model

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("a model was loaded before the task was checked")

    monkeypatch.setattr(fit, "collect", boom)
    monkeypatch.setattr(model.DebiasedHFLM, "__init__", boom)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["fit", "--task", "ni065_format"],
            "--task ni065_format is not a task; use ni065_format_pert (a perturbed task)",
        ),
        (
            ["fit", "--task", "ni065_text_train"],
            "--task ni065_text_train is not a task; use ni065_text_pert (a perturbed task)",
        ),
        (
            ["fit", "--task", "ni065"],
            "--task ni065 is a clean task; use ni065_format_pert or ni065_text_pert "
            "(a perturbed task)",
        ),
        (
            ["fit", "--tasks", "ni065_format_pert,ni069_format"],
            "--tasks ni069_format is not a task; use ni069_format_pert (a perturbed task)",
        ),
        (
            ["lora", "--task", "ni065_format"],
            "--task ni065_format is not a task; use ni065_format_pert (a perturbed task)",
        ),
    ],
)
def test_misspelt_task_is_one_line_before_the_model(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _no_model(monkeypatch)
    assert main([*argv, "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"lm-eval-robust: error: {message}\n"


def test_fit_accepts_the_task_aliases_and_splits() -> None:
    from lm_eval_robust.cli.args import perturbed_task

    assert perturbed_task("ni065_format_pert") == "ni065_format_pert"
    assert perturbed_task("065_text_pert_train") == "ni065_text_pert"
    assert perturbed_task("ni065_format_pert_holdout") == "ni065_format_pert"


def test_fit_unknown_task_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_model(monkeypatch)
    assert main(["fit", "--task", "ni999_format_pert", "-o", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "lm-eval-robust: error: unknown task 'ni999_format_pert' for --task; use "
        "<task>_format_pert or <task>_text_pert with a task of ni065, "
    )
    assert err.count("\n") == 1


def test_select_unknown_pass_task_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_model(monkeypatch)
    assert main(["select", "--pretrained", "x", "--tasks", "ni065_format"]) == 2
    assert capsys.readouterr().err == (
        "lm-eval-robust: error: unknown task 'ni065_format' in --tasks; did you mean "
        "'ni065_format_lb'? (e.g. ni_format_pert,ni_text_pert, or ni065_format_pert)\n"
    )
