"""The harness task class of our Natural Instructions tasks.

Our prompts carry their demonstrations themselves (``n_shots``, two by default, taken from the
task file and perturbed with the rest of the prompt), so the harness must add none: the YAML keeps
``num_fewshot: 0``. The harness's table and results JSON report ``n-shot`` from the task's dumped
config; this class reports the shot count of the prompts there instead of the harness's 0.
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.task import ConfigurableTask


class PromptShotsTask(ConfigurableTask):
    """A configurable task whose dumped ``num_fewshot`` is the demonstrations in its prompts."""

    def __init__(self, *args: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if config is not None:
            config = {k: v for k, v in config.items() if k != "class"}
        super().__init__(*args, config=config, **kwargs)

    def prompt_shots(self) -> int:
        metadata = self.config.metadata or {}
        try:
            return int(metadata.get("n_shots", 0))
        except (TypeError, ValueError):
            return 0

    def dump_config(self) -> dict[str, Any]:
        config: dict[str, Any] = dict(super().dump_config())
        config["num_fewshot"] = self.prompt_shots()
        config["num_fewshot_note"] = "demonstrations inside the prompt (n_shots); harness adds 0"
        return config
