"""One base class for errors whose one-line message names the problem and the fix."""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user (settings, files, data, model): print the message, not a trace."""
