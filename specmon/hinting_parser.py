"""argparse that says what was probably meant: a mistyped subcommand, flag or choice gets "did you mean" (difflib),
said by the parser of the (sub)command it belongs to, with that command's own usage. Also `--version`'s action."""

from __future__ import annotations

import argparse
import re
import sys

_NEGATIVE_NUMBER = re.compile(r"^-\d+\Z|^-\d*\.\d+\Z")  # \Z: `$` also matches before a final newline


class ArgumentRefused(argparse.ArgumentTypeError):
    """An argument's type refused its value with a message that says it all: said in one line, no usage above it."""


class HintingParser(argparse.ArgumentParser):
    """argparse whose errors say "did you mean" for a mistyped subcommand, flag or choice (difflib), each said by
    the parser of the (sub)command it belongs to, with that command's own usage."""

    commands: dict[str, argparse.ArgumentParser] = {}
    _given: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        if isinstance(getattr(sys.exc_info()[1], "__context__", None), ArgumentRefused):
            self.exit(2, f"{self.prog}: error: {message}\n")
        super().error(message + self._suggestions(message))

    def unknown_options(self) -> list[str]:
        """The flags given to this parser that are none of its own (nor a prefix argparse would take)."""
        known = [o for action in self._actions for o in action.option_strings]
        unknown = []
        for word in self._given:
            if word == "--" or self.commands and not word.startswith("-"):
                break  # what follows the command (or a mistyped one) is the command's
            name = word.split("=", 1)[0]
            if not name.startswith("-") or name == "-" or _NEGATIVE_NUMBER.match(name) or name in known:
                continue
            if name.startswith("--") and sum(o.startswith(name) for o in known) == 1:
                continue  # an abbreviation argparse takes
            unknown.append(name)
        return unknown

    def _suggestions(self, message: str) -> str:
        from specmon.text import did_you_mean

        choice = re.search(r"invalid choice: '([^']*)'", message)
        said = ""
        if choice:
            options = [c for a in self._actions if a.choices for c in a.choices if choice.group(1) not in a.choices]
            said = did_you_mean(choice.group(1), [str(c) for c in options])
        return said + self._flag_suggestions(message)

    def _flag_suggestions(self, message: str) -> str:
        from specmon.text import close_to

        flags = [o for action in self._actions for o in action.option_strings]
        meant = {name: close_to(name, flags) for name in self.unknown_options()}
        hints = [(f"{name}: " if len(meant) > 1 else "") + f"did you mean {' or '.join(close)}?"
                 for name, close in meant.items() if close]
        said = f" ({'; '.join(hints)})" if hints else ""
        if message.startswith("unrecognized arguments:") or not meant:
            return said
        return f"; and {self.prog} has no {', '.join(meant)}{said}"


class PrintVersion(argparse.Action):
    """`--version`: the installed distribution's version (importlib.metadata, read only when asked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default,
                         help=help or "print specmon's version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            said = version("specmon")
        except PackageNotFoundError:
            said = "unknown (not installed)"
        print(f"specmon {said}")
        parser.exit()
