"""Argument parsing as every job does it: an error is one line naming the option and where to read
more (not a 30-line usage block), an unknown flag gets the closest known one, and `--help` states
each option's default."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence

SUGGESTION_CUTOFF = 0.6  # difflib's default: `--sed` finds `--seed`, `--ouput` finds `--output`


def parser_flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every long flag `parser` knows, without its dashes (`output`, `no_trim_padding`)."""
    return {opt.lstrip("-") for action in parser._actions for opt in action.option_strings if opt.startswith("--")}


def closest_flag(arg: str, known: Iterable[str]) -> str | None:
    """The known flag (without dashes) closest to `arg` (`--mlm_probabilty=0.2` -> `mlm_probability`), or None."""
    close = difflib.get_close_matches(arg.split("=", 1)[0].lstrip("-"), sorted(set(known)), n=1,
                                      cutoff=SUGGESTION_CUTOFF)
    return close[0] if close else None


def unrecognized(args: Sequence[str], known: Iterable[str]) -> str:
    """`unrecognized arguments: --ouput (did you mean --output?) /tmp/x`: each unknown flag followed by
    the closest of `known` (flags without their dashes) where one is close enough."""
    known = set(known)
    shown = []
    for arg in args:
        match = closest_flag(arg, known) if arg.startswith("--") else None
        shown.append(f"{arg} (did you mean --{match}?)" if match else arg)
    return f"unrecognized arguments: {' '.join(shown)}"


class OneLineParser(argparse.ArgumentParser):
    """An error is one line naming the option, and where to read more; not a 30-line usage block.
    An unknown flag is named with the closest flag of this parser (`--sed` -> `--seed`)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (--help lists every option)\n")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        known, rest = self.parse_known_args(args, namespace)
        if rest:
            self.error(unrecognized(rest, parser_flags(self)))
        return known


class DefaultsFormatter(argparse.HelpFormatter):
    """Adds `(default: X)` to every option's help that does not state its default itself."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS, []) or not action.option_strings:
            return text
        return f"{text} (default: {'off' if action.default is False else '%(default)s'})"
