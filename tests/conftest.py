"""Shared fixtures: the data directory and a tiny random Llama with a BPE tokenizer trained here.

No test downloads anything: the tokenizer is trained in a few hundred milliseconds on text made
in this file, and the model is randomly initialised from a seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _data_dir() -> Path:
    env = os.environ.get("LM_EVAL_ROBUST_DATA_DIR")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    if not (path / "natural-instructions" / "tasks").is_dir():
        raise RuntimeError(
            f"test data not found at {path}; set LM_EVAL_ROBUST_DATA_DIR to the folder holding "
            "natural-instructions/ (CI uses ../shared/data)"
        )
    return path


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = _data_dir()
    os.environ["LM_EVAL_ROBUST_DATA_DIR"] = str(path)
    return path


def _corpus() -> list[str]:
    import json

    labels = "A B C D E F G H a b c d e f g h 0 1 2 3 4 5 6 7 8 9 i ii iii iv I II III IV"
    words = "Threat Non Gender Profession Race Religion Option Sentence Question Options"
    texts = [f"Answer: {labels} {words}"] * 50  # frequent enough to make " A", " 1"... one token
    tasks = _data_dir() / "natural-instructions" / "tasks"
    for f in sorted(tasks.glob("*.json"))[:4]:
        data = json.loads(f.read_text(encoding="utf-8"))
        texts.append(data["Definition"][0])
        texts += [inst["input"] for inst in data["Instances"][:20]]
    return texts


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama (float32) and a byte-level BPE tokenizer, saved as an HF folder."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = tmp_path_factory.mktemp("tiny-llama")
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(_corpus(), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tok.save_pretrained(out)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(out)
    return out


INSTALL_TESTS_ENV = "LM_EVAL_ROBUST_INSTALL_TESTS"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``install`` (a scratch venv per install mode, about a minute) run on request.

    They run when ``LM_EVAL_ROBUST_INSTALL_TESTS=1`` (``.ci/run`` sets it) or when ``-m`` names
    them (``pytest -m install tests``); otherwise they are skipped with that hint.
    """
    if os.environ.get(INSTALL_TESTS_ENV) == "1" or "install" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason=f"install check: set {INSTALL_TESTS_ENV}=1 or -m install")
    for item in items:
        if "install" in item.keywords:
            item.add_marker(skip)
