"""Below the CLI, every error autotune raises on purpose is in ``autotune.errors``' tree: no ``raise ValueError``,
``KeyError``, ``SystemExit`` (nor any other built-in exception) and no ``sys.exit`` in the package, read from its
source, except where a protocol asks for a built-in exception:

- a pydantic validator (a ``field_validator``/``model_validator`` method, or a function given to ``AfterValidator``
  and its kin): pydantic turns its ``ValueError`` into the field's validation error, which the callers word;
- a built-in exception raised and caught by the same ``try`` (a shortcut to its handler);
- ``AssertionError`` (an invariant, as ``assert`` states one: a bug's traceback, not an error to word);
- the few protocol methods of ``PROTOCOLS``, each with the protocol that asks for it.

``cli/`` (it turns errors into lines and exit codes), ``testing/`` (fakes) and ``__main__`` modules (process entry
points) are outside the rule.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autotune"
OUTSIDE = ("cli", "testing")
VALIDATOR_DECORATORS = {"field_validator", "model_validator"}
VALIDATOR_WRAPPERS = {"AfterValidator", "BeforeValidator", "PlainValidator", "WrapValidator"}
PROTOCOLS = {
    ("__init__.py", "__getattr__"): "a module's __getattr__ (PEP 562): a missing name is an AttributeError",
    ("engines/__init__.py", "EngineRegistry.__getitem__"): "Mapping: a missing key is a KeyError (get, in use it)",
    ("evidence/dashboard.py", "DashboardView.get_best_trial"): "Optuna's storage API: no best trial is ValueError",
    ("search/workers.py", "_node_worker"): "a forked worker process: its exit status is its parent's to read",
    ("search/tuner_lifeline.py", "die_with"): "a node worker whose tuner is already gone: it exits at once",
}


def _builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def _raised_name(node: ast.Raise) -> str | None:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return exc.id if isinstance(exc, ast.Name) else None


def _is_sys_exit(node: ast.Call) -> bool:
    func = node.func
    return isinstance(func, ast.Attribute) and func.attr in {"exit", "_exit"} and isinstance(func.value, ast.Name) \
        and func.value.id in {"sys", "os"}  # fmt: skip


def _caught_by(name: str, handlers: list[ast.ExceptHandler]) -> bool:
    for handler in handlers:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(t, ast.Name) and t.id in {name, "Exception", "BaseException"} for t in types):
            return True
    return False


def wrapped_validators(trees: list[ast.AST]) -> set[str]:
    """Names of the functions given to ``AfterValidator`` and its kin (a validator defined in one module may be
    wrapped in another: ``engine_registry.registered_engine`` in ``config``)."""
    return {arg.id for tree in trees for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id in VALIDATOR_WRAPPERS
            for arg in node.args if isinstance(arg, ast.Name)}  # fmt: skip


def offences(path: Path, relative: str, wrapped: set[str] | None = None) -> list[str]:
    """``relative:line: what`` for each built-in exception raised (or exit called) outside the rule's exceptions."""
    tree = ast.parse(path.read_text())
    wrapped = wrapped_validators([tree]) if wrapped is None else wrapped
    found: list[str] = []

    def visit(node: ast.AST, scope: tuple[str, ...], validator: bool, tries: tuple[ast.Try, ...]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            decorators = {d.func.id if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) else
                          getattr(d, "id", None) for d in getattr(node, "decorator_list", [])}  # fmt: skip
            is_validator = bool(decorators & VALIDATOR_DECORATORS) or node.name in wrapped
            for child in ast.iter_child_nodes(node):
                visit(child, (*scope, node.name), validator or is_validator, ())
            return
        where = ".".join(scope)
        allowed = validator or (relative, where) in PROTOCOLS
        name = _raised_name(node) if isinstance(node, ast.Raise) else None
        if name and _builtin_exception(name) and name != "AssertionError" and not allowed \
                and not any(_caught_by(name, t.handlers) for t in tries):  # fmt: skip
            found.append(f"{relative}:{node.lineno}: raise {name} in {where or 'the module'}")
        if isinstance(node, ast.Call) and _is_sys_exit(node) and not allowed:
            found.append(f"{relative}:{node.lineno}: {ast.unparse(node.func)}() in {where or 'the module'}")
        if isinstance(node, ast.Try):
            for child in node.body:
                visit(child, scope, validator, (*tries, node))
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, scope, validator, tries)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, scope, validator, tries)

    visit(tree, (), False, ())
    return found


def package_offences() -> list[str]:
    paths = sorted(PACKAGE.rglob("*.py"))
    wrapped = wrapped_validators([ast.parse(path.read_text()) for path in paths])
    found = []
    for path in paths:
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.split("/")[0] in OUTSIDE or path.name == "__main__.py":
            continue
        found += offences(path, relative, wrapped)
    return found


def test_nothing_below_the_cli_raises_a_builtin_exception_on_purpose() -> None:
    assert package_offences() == []


def test_every_protocol_exception_still_exists() -> None:
    """An entry of PROTOCOLS whose method is gone would excuse a future raise there: each must name a real method."""
    for relative, qualname in PROTOCOLS:
        tree = ast.parse((PACKAGE / relative).read_text())
        names = {f"{c.name}.{f.name}" for c in tree.body if isinstance(c, ast.ClassDef) for f in c.body
                 if isinstance(f, ast.FunctionDef)} | {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}  # fmt: skip
        assert qualname in names, (relative, qualname)


def test_the_checker_finds_what_it_forbids(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import sys\n"
        "from pydantic import AfterValidator, field_validator\n"
        "def f(x):\n    raise ValueError('bad')\n"  # found
        "def g():\n    sys.exit(1)\n"  # found
        "def h(x):\n    raise KeyError(x)\n"  # found
        "def v(x):\n    raise ValueError('ok: a validator')\n"
        "T = AfterValidator(v)\n"
        "class M:\n    @field_validator('a')\n    def c(cls, x):\n        raise ValueError('ok')\n"
        "def t(x):\n    try:\n        raise TypeError\n    except (TypeError, KeyError):\n        return 1\n"
        "def u(x):\n    try:\n        raise TypeError\n    except KeyError:\n        return 1\n"  # found
    )
    assert offences(source, "m.py") == [
        "m.py:4: raise ValueError in f",
        "m.py:6: sys.exit() in g",
        "m.py:8: raise KeyError in h",
        "m.py:23: raise TypeError in u",
    ]


def test_an_adapter_that_accepts_an_unknown_knob_is_an_engine_definition_error() -> None:
    import pytest

    from autotune.engines.base import Engine
    from autotune.errors import AutotuneError, EngineDefinitionError

    with pytest.raises(EngineDefinitionError, match=r"accepts names no knob of ServerConfig: \['warp_speed'\]") as info:

        class Broken(Engine):
            name = "broken"
            accepts = frozenset({"tp", "warp_speed"})

    assert isinstance(info.value, AutotuneError)
