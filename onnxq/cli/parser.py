"""The command line's parser: one-line errors that name a misspelt flag's nearest real one, and help laid out in a
column at most 100 characters wide."""

from __future__ import annotations

import argparse
import shutil
import sys

from onnxq.errors import ConfigError, closest, one_line

__all__ = ["Parser", "HelpFormatter", "path_arg"]


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (the usage block would bury the problem): a misspelt flag named with the
    nearest real one, anything else with a pointer to --help. Long flags are never abbreviated: a prefix that
    happens to be unique today (--min-cosin) would change meaning when a flag is added."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._given: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._given, namespace)

    def error(self, message: str):
        unknown = self.unknown_flag()
        if unknown is not None:  # first: a misspelt flag also shifts what the parser sees as missing or extra
            raise ConfigError(unknown)
        raise ConfigError(f"{message} — see {self.prog} --help")

    def unknown_flag(self) -> str | None:
        """The first long flag given that this parser does not define, as one line with the nearest it does."""
        for token in self._given:
            if token == "--":
                break
            name = token.partition("=")[0]
            if name.startswith("--") and name not in self._option_string_actions:
                flags = [f for f in self._option_string_actions if f.startswith("--")]
                match = closest(name.lstrip("-"), [f.lstrip("-") for f in flags])
                if match is not None:
                    return f"unknown flag {one_line(repr(name))} — did you mean '--{match}'?"
                return f"unknown flag {one_line(repr(name))} — see {self.prog} --help for the flags"
        return None


class HelpFormatter(argparse.HelpFormatter):
    """Flag help in a column wide enough for most flags and their values; lines no wider than 100 characters, as a
    wide terminal makes long lines hard to read. A description or epilog laid out in lines keeps them; one long line
    is wrapped."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 28, width: int | None = None):
        width = min(width or shutil.get_terminal_size().columns - 2, 100)
        super().__init__(prog, indent_increment, max_help_position, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        """-o, --output PATH rather than -o PATH, --output PATH."""
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        value = self._format_args(action, self._get_default_metavar_for_optional(action))
        return f"{', '.join(action.option_strings)} {value}"


def path_arg(text: str) -> str:
    """A path flag's value: an empty one (an unset variable in a script) is refused, never read as the current
    folder."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path — give a file name")
    return text
