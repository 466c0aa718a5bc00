"""Replay without features: input-independent corrections on the logged label scores alone.

A constant offset, batch or clean calibration (any correction without ``W``) subtracts the same
``β`` from the label logits of every prompt, so the corrected label log-likelihoods follow from
the logged ones (:func:`lm_eval_robust.scoring.debias.corrected_label_logprobs`): no model, no
features, and a run made by any engine with ``--log_samples`` (``hf``, ``debiased_hf``, ``vllm``,
``debiased_vllm``, ``local-completions``) can be corrected afterwards. What a real run checks is
checked here from the files: the correction's model fingerprint against the checkpoint folder the
run names (or ``--model``), its label tokens against the logged continuations (tokenised with that
checkpoint's tokenizer) and its prompt style against the logged contexts. A ridge correction
(``W``) needs the head's input at the label position and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lm_eval_robust.base.errors import UserError

__all__ = ["PostHoc", "ReplayError", "model_folder"]

#: characters of context kept when tokenising a label: the label's last token never depends on
#: text this far back, and tokenising whole prompts for every sample would cost seconds per run
_CONTEXT_TAIL = 200


class ReplayError(UserError):
    """Inputs that cannot be replayed; the message names the file and the fix."""


def _arguments(sample: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(context, continuation)`` of each logged request (a dict or a list, by lm-eval release)."""
    raw = sample.get("arguments")
    rows = list(raw.values()) if isinstance(raw, Mapping) else list(raw or [])
    out: list[tuple[str, str]] = []
    for r in rows:
        args = list(r.values()) if isinstance(r, Mapping) else list(r)
        if len(args) >= 2:
            out.append((str(args[0]), str(args[1])))
    return out


def model_folder(model_args: Mapping[str, Any], model: str | None) -> str:
    """The checkpoint folder of the run: ``model`` if given, else the folder or alias that the
    run's ``pretrained``, ``model`` or ``tokenizer`` arg names."""
    from lm_eval_robust.base.offline_models import OFFLINE_MODELS, resolve_pretrained

    if model is not None:
        names = [model]
    else:
        names = [
            str(model_args[k]) for k in ("pretrained", "model", "tokenizer") if model_args.get(k)
        ]
    for name in names:
        if name in OFFLINE_MODELS:
            return resolve_pretrained(name)
        path = Path(name).expanduser()
        if (path / "config.json").is_file():
            return str(path)
    if model is not None:
        raise ReplayError(
            f"--model {model}: no model folder (config.json) there nor an alias; give the "
            "checkpoint folder the base run served"
        )
    named = ", ".join(names) or "none"
    raise ReplayError(
        f"the base run names no local model folder (model args: {named}), so the correction "
        "cannot be checked against its model; give --model FOLDER, the checkpoint the run served"
    )


class PostHoc:
    """Input-independent corrections by task key, checked against the base run's model."""

    def __init__(
        self, model_args: Mapping[str, Any], correction: str | Path, model: str | None
    ) -> None:
        from transformers import AutoTokenizer

        from lm_eval_robust.scoring.correction import load_corrections
        from lm_eval_robust.scoring.fingerprint import checkpoint_fingerprint

        if model_args.get("lora"):
            raise ReplayError(
                f"the base run used lora={model_args['lora']}, whose adapter cannot be checked "
                "from its files; replay with --features (the run's collect_features folder)"
            )
        folder = model_folder(model_args, model)
        self.folder = folder  # an input: an output may not be, hold or sit inside it
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        fingerprint = checkpoint_fingerprint(folder, self.tokenizer)
        self.corrections = load_corrections(str(correction), fingerprint)
        for key, corr in sorted(self.corrections.items()):
            if corr.W is not None:
                raise ReplayError(
                    f"the {corr.method} correction for {key} depends on the head's input (W), "
                    "which the logged run does not hold; collect it with --model_args "
                    "collect_features=DIR in the base run and give --features DIR, or serve the "
                    "exported checkpoint (lm-eval-robust export --constant offset)"
                )
        self._label_ids: dict[tuple[str, str], int] = {}

    def _label_id(self, context: str, continuation: str) -> int:
        key = (context[-_CONTEXT_TAIL:], continuation)
        if key not in self._label_ids:
            ids = self.tokenizer(key[0] + continuation, add_special_tokens=False)["input_ids"]
            self._label_ids[key] = int(ids[-1])
        return self._label_ids[key]

    def check(self, key: str, sample: Mapping[str, Any], where: str) -> None:
        """Refuse a logged prompt the correction of ``key`` was not fitted for."""
        corr = self.corrections[key]
        args = _arguments(sample)
        if len(args) != corr.d:
            raise ReplayError(
                f"{where}: {len(args)} labels logged but the correction for {key} has {corr.d} "
                f"({corr.labels}); fit it for this task"
            )
        doc = sample.get("doc") or {}
        style = "plain" if args[0][0] == doc.get("prompt") else "chat"
        fitted = corr.stats.get("prompt_style")
        if fitted is not None and fitted != style:
            raise ReplayError(
                f"{where}: the correction for {key} was fitted on {fitted}-style prompts but the "
                f"run's are {style}-style; refit it on {style} prompts"
            )
        if corr.stats.get("labels_are_positions"):
            return
        ids = [self._label_id(c, t) for c, t in args]
        if ids != corr.label_token_ids:
            raise ReplayError(
                f"{where}: the correction for {key} scores label tokens {corr.label_token_ids} "
                f"({corr.labels}) but the run's labels are tokens {ids}; fit it for this task and "
                "model"
            )
