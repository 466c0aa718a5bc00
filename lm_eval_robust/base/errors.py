"""One base class for errors whose one-line message names the problem and the fix."""

from __future__ import annotations

import argparse
from typing import NoReturn


class UserError(ValueError):
    """Bad input from the user (settings, files, data, model): print the message, not a trace."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """An argument parser whose errors are one-line :class:`UserError` (no usage block)."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message}; see `{self.prog} --help`")


class CorrectionError(UserError):
    """A correction file or object that cannot be used here (one line saying why and the fix)."""


#: the fix a correction error names when the correction must be fitted again
FIT_HINT = "re-run `lm-eval-robust fit`"
