"""One --help style for the harness's commands: defaults shown, but never twice and never as "None"."""

from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults formatter, except where the help already says its default or there is none.

    Options whose default depends on the machine (CPU or GPU) describe it in their help text and have
    `default=None`; argparse would append a misleading "(default: None)" after that description.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, "", argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)
