"""Click's usage errors (a bad option value, an unknown option, an extra argument, a missing value) as one line,
``autotune: error: <what>; fix: <how>`` and exit code 2, like every other error: not click's usage box.

The root group catches them, once for every command: a subcommand's arguments are parsed inside its group's
``invoke``, the root's own in its ``make_context``. A group run without arguments still prints its help.
"""

from __future__ import annotations

import difflib
import re
import sys
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from autotune.text import VALUE_WIDTH, brief_repr, lowercase_first, shorten

# typer's usage errors are click's, or those of the copy of click that recent typer carries; BadParameter is public
_errors = sys.modules[typer.BadParameter.__module__]
_UsageError: type[Exception] = _errors.UsageError
_NoArgsIsHelp = getattr(_errors, "NoArgsIsHelpError", ())  # a group run bare: its help, shown as click shows it
_EXTRA_ARGUMENTS = re.compile(r"unexpected extra arguments?(?:\(s\))? \((.*)\)", re.IGNORECASE)
_NO_SUCH_COMMAND = re.compile(r"no such command '(.*?)'", re.IGNORECASE)
_MESSAGE_WIDTH = 300  # a usage error's own text, whatever was typed
_CLICK_VALUE = re.compile(r"^(?P<value>.*?) is not (?:in the range|a valid)")

# what a pydantic bound says, in the words of an option's range (`typer.Option(min=1)`)
_BOUNDS = {
    "greater_than_equal": ("ge", "must be at least {}"),
    "greater_than": ("gt", "must be above {}"),
    "less_than_equal": ("le", "must be at most {}"),
    "less_than": ("lt", "must be below {}"),
}


class OneLineUsage(TyperGroup):
    """A group whose usage errors, and those of every command under it, are one line with the fix."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except _NoArgsIsHelp:
            raise
        except _UsageError as exc:
            _refuse(exc)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _NoArgsIsHelp:
            raise
        except _UsageError as exc:
            _refuse(exc)


def _refuse(exc: Any) -> NoReturn:
    what, fix = usage_problem(exc)
    print(f"autotune: error: {what}; fix: {fix}", file=sys.stderr)
    raise typer.Exit(2)


def usage_problem(exc: Any) -> tuple[str, str]:
    """What is wrong, and how to fix it, for one of click's usage errors (each on one line)."""
    ctx = exc.ctx
    command = _command_line(ctx)
    param = getattr(exc, "param", None)
    if isinstance(exc, _errors.MissingParameter) and param is not None:
        return f"missing {param.param_type_name} {_name(param)}", f"give {_name(param)} (`{command} --help`)"
    if isinstance(exc, typer.BadParameter) and param is not None:
        return f"{_name(param)} {_bad_value(exc)}", f"`{command} --help` says what {_name(param)} takes"
    if isinstance(exc, _errors.NoSuchOption):
        close = f"did you mean {' or '.join(sorted(exc.possibilities))}? " if exc.possibilities else ""
        return f"no such option {brief_repr(exc.option_name)}", f"{close}`{command} --help` lists the options"
    message = shorten(exc.format_message(), _MESSAGE_WIDTH).rstrip(".")
    if extra := _EXTRA_ARGUMENTS.search(message):
        return _extra_arguments(extra.group(1).split(), ctx, command)
    if (unknown := _NO_SUCH_COMMAND.search(message)) and ctx is not None:
        names = ctx.command.list_commands(ctx)
        close = difflib.get_close_matches(unknown.group(1), names, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        return f"no such command {brief_repr(unknown.group(1))}", f"{guess}use one of: {', '.join(names)}"
    what = message[:1].lower() + message[1:]
    if isinstance(exc, _errors.BadOptionUsage):  # the parser's, without the command: a value missing, or one too many
        option = exc.option_name
        return what, (f"write a value after it: {option} VALUE" if "requires" in message else f"write {option} alone")
    return what, f"`{command} --help` shows the usage"


def _extra_arguments(extra: list[str], ctx: Any, command: str) -> tuple[str, str]:
    what = f"unexpected argument{'s' if len(extra) > 1 else ''} {brief_repr(' '.join(extra))}"
    options = {opt for param in ctx.command.params for opt in param.opts} if ctx is not None else set()
    if len(extra) == 1 and "--study" in options:
        return what, f"name the study with --study {shorten(extra[0], 80)}"
    usage = " ".join(ctx.command.collect_usage_pieces(ctx)) if ctx is not None else "[OPTIONS]"
    return what, f"the usage is `{command} {usage}` (quote a value that has spaces)"


def _bad_value(exc: Any) -> str:
    """The complaint about a value, with the value: "must be at least 1 (got 0)"."""
    from pydantic import ValidationError  # here: `autotune --help` and `--version` do not pay for importing pydantic

    cause = exc.__cause__
    if not isinstance(cause, ValidationError):  # click's own message names the value
        return _click_range(exc) or shorten(exc.message, _MESSAGE_WIDTH).rstrip(".")
    error = cause.errors()[0]
    got = f" (got {shorten(str(error['input']), VALUE_WIDTH)})"  # as typed: a command-line value is a string
    if error["type"] in _BOUNDS:
        bound, words = _BOUNDS[error["type"]]
        return words.format(error["ctx"][bound]) + got
    return lowercase_first(error["msg"]) + got


def _click_range(exc: Any) -> str | None:
    """A number option's bad value in the words of the pydantic path above, where typer checks it with click's own
    range type (typer before 0.29: ``0 is not in the range x>=1``, ``'many' is not a valid int range``), or None."""
    kind, message = getattr(exc.param, "type", None), str(exc.message)
    if not hasattr(kind, "min_open") or not (match := _CLICK_VALUE.match(message)):
        return None
    got = f" (got {shorten(match['value'].strip(chr(39)), VALUE_WIDTH)})"
    if "not in the range" not in message:
        return ("input should be a valid integer" if "int" in type(kind).__name__.lower() else
                "input should be a valid number") + got  # fmt: skip
    if kind.min is not None:
        return (f"must be above {kind.min}" if kind.min_open else f"must be at least {kind.min}") + got
    return (f"must be below {kind.max}" if kind.max_open else f"must be at most {kind.max}") + got


def _name(param: Any) -> str:
    """How the user writes a parameter: its long option (--n-trials), or an argument's metavar (SPACE)."""
    if param.param_type_name == "option":
        return max(param.opts, key=len)
    return param.metavar or param.name.upper()


def _command_line(ctx: Any) -> str:
    """The command as the user types it, e.g. ``autotune study run`` (whatever the program was called)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["autotune", *reversed(names)])
