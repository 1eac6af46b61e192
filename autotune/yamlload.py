"""Reading YAML a user wrote (a space, a workload list, a ``--set`` value): one loader for all of it.

It is PyYAML's SafeLoader, with four refusals, each a ``yaml.YAMLError`` (with its line where it has one):

- a duplicate key (PyYAML would silently keep the last one);
- an integer too long for Python to read (more than ``sys.get_int_max_str_digits()`` digits: a ValueError otherwise);
- aliases that repeat more than ``MAX_ALIAS_VALUES`` values in all. An alias (``*name``) is a reference to its
  anchor's node, so nine nested lists of nine aliases are 90 nodes in the file and 9⁹ values once expanded (an
  "alias bomb"): gigabytes, and minutes of validating. The values each alias stands for are counted while the
  document is composed, before anything is expanded, and the document is refused at the alias that crosses the bound;
- a text longer than ``MAX_YAML_BYTES`` (``TooLarge``): composing and validating cost about 20 ms a KiB, so a 94 MB
  file took eight minutes and 4 GB before it said anything.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import yaml

# Values (scalars, lists, mappings) that aliases may repeat in one document. A space shares a block of a few dozen
# values between engines this way; ten thousand leaves room for that and keeps validation and errors instant.
MAX_ALIAS_VALUES = 10_000
# The most a YAML text autotune reads may hold: 100 times the largest shipped space (5 KiB). A space this size of
# nothing but choices (33,000 of them) validates in about 10 s on a busy 2-core machine; 94 MB took eight minutes.
MAX_YAML_BYTES = 512 * 1024


class Refused(yaml.MarkedYAMLError):
    """A document refused for what it would cost, not for its syntax: ``problem`` says why, ``fix`` what to do."""

    fix: str


class AliasBomb(Refused):
    """The document's aliases repeat more than ``MAX_ALIAS_VALUES`` values; ``problem_mark`` is the alias."""

    fix = "write the repeated values out, or repeat fewer of them through aliases (*name)"


class TooLarge(Refused):
    """The text is longer than ``MAX_YAML_BYTES`` (no ``problem_mark``: it is refused before it is read)."""

    fix = (f"keep it under {MAX_YAML_BYTES // 1024} KiB: a space lists the values to search, not data (prompts go "
           "in the workload's file)")  # fmt: skip


def refuse_oversized(size: int) -> None:
    """Refuse a YAML text (or a file, before it is read) of ``size`` bytes over ``MAX_YAML_BYTES``.

    Raises:
        TooLarge: it is over.
    """
    if size > MAX_YAML_BYTES:
        raise TooLarge(None, None, f"{_size_text(size)} of YAML, over the {MAX_YAML_BYTES // 1024} KiB limit", None)


class YamlProblem(NamedTuple):
    """A refused YAML document in the words of an error: where in it (``line 3, column 5``, or empty), what is wrong,
    and the fix."""

    where: str
    problem: str
    fix: str


def yaml_problem(exc: yaml.YAMLError) -> YamlProblem:
    """What ``load_yaml`` refused, for a one-line error: a syntax error with its line, or a refusal with its fix."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if isinstance(exc, Refused):
        return YamlProblem(where, problem, exc.fix)
    return YamlProblem(where, f"malformed YAML: {problem}", "correct the YAML syntax there")


def _size_text(size: int) -> str:
    return f"{size / 1024**2:.1f} MiB" if size >= 1024**2 else f"{size / 1024:.0f} KiB"


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._values: dict[int, int] = {}  # id(node) -> values it stands for, itself and everything under it
        self._repeated = 0  # values the aliases composed so far stand for

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            self._repeated += self._values.get(id(node), 1)  # an alias inside its own anchor: one value
            if self._repeated > MAX_ALIAS_VALUES:
                raise AliasBomb(None, None, f"aliases repeat more than {MAX_ALIAS_VALUES} values", mark)
            return node
        node = super().compose_node(parent, index)
        children = node.value if isinstance(node, yaml.SequenceNode) else []
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        self._values[id(node)] = 1 + sum(self._values.get(id(child), 1) for child in children)
        return node


def _mapping_without_duplicates(loader: _Loader, node: yaml.MappingNode) -> dict:
    seen: dict[Any, yaml.Mark] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
        except TypeError:  # a list or mapping as a key: construct_mapping refuses it, with its line
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key].line + 1})", key_node.start_mark
            )
        seen[key] = key_node.start_mark
    return loader.construct_mapping(node)


def _int_python_can_read(loader: _Loader, node: yaml.ScalarNode) -> int:
    try:
        return loader.construct_yaml_int(node)
    except ValueError:  # Python refuses to read an integer of more than sys.get_int_max_str_digits() digits
        raise yaml.constructor.ConstructorError(
            None, None, "an integer with too many digits", node.start_mark
        ) from None


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
_Loader.add_constructor("tag:yaml.org,2002:int", _int_python_can_read)


def load_yaml(text: str) -> Any:
    """The value of one YAML document, as ``yaml.safe_load`` gives it.

    Raises:
        AliasBomb: its aliases repeat more than ``MAX_ALIAS_VALUES`` values.
        TooLarge: it is longer than ``MAX_YAML_BYTES`` (counted in characters: never more than its bytes).
        yaml.YAMLError: it is not valid YAML, a mapping has a key twice, or it is nested too deep.
    """
    refuse_oversized(len(text))
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:  # PyYAML composes and constructs recursively: thousands of nested [ or { exhaust the stack
        raise yaml.YAMLError("nested too deep (thousands of levels of lists or mappings)") from None
