"""Build hook: place ``lm_eval_robust_hook.pth`` at the root of the wheel (site-packages).

The .pth holds one line that imports ``_lm_eval_robust_hook``, a few-line module that waits for
``lm_eval`` to be imported and only then registers our model and task directory (lm-eval 0.4.13
has no plugin discovery). Everything else is configured in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "lm_eval_robust_hook.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / PTH
        shutil.copyfile(Path(__file__).parent / PTH, target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
