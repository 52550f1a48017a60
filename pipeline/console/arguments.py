"""Argument parsing as every job does it: an error is one line naming the option and where to read
more (not a 30-line usage block), and `--help` states each option's default."""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """An error is one line naming the option, and where to read more; not a 30-line usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (--help lists every option)\n")


class DefaultsFormatter(argparse.HelpFormatter):
    """Adds `(default: X)` to every option's help that does not state its default itself."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS, []) or not action.option_strings:
            return text
        return f"{text} (default: {'off' if action.default is False else '%(default)s'})"
