"""Every event name the code can write to the event log, read from its source with `ast`
(docs/events.md lists them; tests/unit/test_log_events.py keeps the two equal).

A name reaches the log in one of three ways, and the collector knows each:

- a core's `Log(event, fields)` command, which the drivers write as they are (wrappers that
  build one, such as the worker's `_unknown_attempt_log`, are followed to their callers);
- a service's `EventLog.emit(event, fields)` or the simulator's
  `SimLog.emit(ts, svc, event, fields)`, on a log held as `log`, `self.log` or `self._log`;
- a log's `emit` handed to another object as a callback (the broker's `events`), followed to
  the calls of the attribute that keeps it.

The name itself may be a literal, a choice between literals, a local or attribute assigned
from one, a parameter (its values are those of every call site), or a table looked up by
such a value (the LM's `_END_LINES[why]`). A name the collector cannot work out is an error
naming its place, never skipped: the set is exact or the test fails. A driver that passes a
`Log` command's `event` on (`command.event`) adds nothing: the name was counted where the
`Log` was made.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# every package of the project, not named modules: code moves between them
PACKAGES = tuple(sorted(path.parent.name for path in ROOT.glob("*/__init__.py")))
LOG_RECEIVERS = {"log", "_log"}  # `log`, `self.log`, `env.log`, `self._log`: an event log
STEP_RECEIVERS = {"step"}  # a core's `Step`: its `emit` takes a command, not a name
SIMLOG_POSITIONAL = 3  # SimLog.emit(ts, svc, event, ...); EventLog.emit(event, fields) has 2
MAX_DEPTH = 8  # parameters followed through this many calls


class UnknownEventName(Exception):
    """The collector cannot tell which names an expression gives: teach it, do not skip."""


@dataclass(frozen=True)
class Scope:
    """Where an expression is: its module, and the function and class around it."""

    module: str
    path: str  # from the project's root
    function: ast.FunctionDef | ast.AsyncFunctionDef | None
    cls: ast.ClassDef | None

    def where(self, node: ast.AST) -> str:
        return f"{self.path}:{getattr(node, 'lineno', '?')}"


class Source:
    """The parsed modules of the packages: every node with its scope, and what each module
    imports whole."""

    def __init__(self, packages: tuple[str, ...] = PACKAGES, root: Path = ROOT) -> None:
        self.nodes: list[tuple[ast.AST, Scope]] = []
        self.whole_imports: dict[str, set[str]] = {}
        for package in packages:
            for path in sorted((root / package).rglob("*.py")):
                relative = path.relative_to(root)
                parts = relative.with_suffix("").parts
                module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                tree = ast.parse(path.read_text(), filename=str(path))
                self.nodes.extend(_walk(tree, Scope(module, str(relative), None, None)))
                # `import math`: `math.log(...)` calls a module's function, not a method
                self.whole_imports[module] = {
                    (alias.asname or alias.name).split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}

    def functions(self, name: str) -> Iterator[Scope]:
        for node, scope in self.nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                yield Scope(scope.module, scope.path, node, scope.cls)


def _walk(node: ast.AST, scope: Scope) -> Iterator[tuple[ast.AST, Scope]]:
    for child in ast.iter_child_nodes(node):
        yield child, scope
        if isinstance(child, ast.ClassDef):
            yield from _walk(child, Scope(scope.module, scope.path, None, child))
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _walk(child, Scope(scope.module, scope.path, child, scope.cls))
        else:
            yield from _walk(child, scope)


def event_names(source: Source | None = None) -> dict[str, list[str]]:
    """Every event name the packages can log, with the places that log it."""
    source = source or Source()
    names: dict[str, list[str]] = {}
    for expression, scope in _event_arguments(source):
        for name in _values(source, expression, scope, 0):
            names.setdefault(name, []).append(scope.where(expression))
    return names


def _event_arguments(source: Source) -> Iterator[tuple[ast.expr, Scope]]:
    """The expressions that name an event, where the code hands one to the log."""
    callbacks: set[str] = set()  # attributes holding a log's `emit`
    emits = understood = 0  # a log's `emit` anywhere, and where the collector follows it
    for node, scope in source.nodes:
        emits += _is_log_emit(node)
        if isinstance(node, ast.Call):
            understood += _is_log_emit(node.func)
            func = node.func
            if _called(func) == "Log":
                yield _argument(node, 0, "event", scope), scope
            elif isinstance(func, ast.Attribute) and func.attr == "emit":
                receiver = _called(func.value)
                if receiver in STEP_RECEIVERS:
                    continue
                if receiver not in LOG_RECEIVERS:
                    raise UnknownEventName(f"{scope.where(node)}: `{ast.unparse(func)}` is "
                                           "neither an event log's emit nor a step's")
                simlog = len(node.args) >= SIMLOG_POSITIONAL
                yield _argument(node, 2 if simlog else 0, "event", scope), scope
            for keyword in node.keywords:
                if _is_log_emit(keyword.value):
                    callbacks.add(_stored_as(source, node, keyword.arg, scope))
                    understood += 1
    if emits != understood:
        raise UnknownEventName("a log's `emit` is handed on other than as a keyword argument: "
                               "teach the collector where it goes")
    for node, scope in source.nodes:
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in callbacks and _called(node.func.value) == "self"):
            yield _argument(node, 0, "event", scope), scope


def _called(node: ast.expr) -> str | None:
    """The last name of `a.b.c` or `c`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_log_emit(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "emit"
            and _called(node.value) in LOG_RECEIVERS)


def _argument(call: ast.Call, index: int, keyword: str, scope: Scope) -> ast.expr:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
        return call.args[index]
    raise UnknownEventName(f"{scope.where(call)}: no event name in `{ast.unparse(call)}`")


def _stored_as(source: Source, call: ast.Call, parameter: str | None, scope: Scope) -> str:
    """The attribute a class keeps the callback passed as `parameter` to its constructor in
    (`self._events = events or ...`)."""
    cls_name = _called(call.func)
    for init in source.functions("__init__"):
        if init.cls is None or init.cls.name != cls_name:
            continue
        for node in ast.walk(init.function):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Attribute)
                    and any(isinstance(n, ast.Name) and n.id == parameter
                            for n in ast.walk(node.value))):
                return node.targets[0].attr
    raise UnknownEventName(f"{scope.where(call)}: where does {cls_name} keep `{parameter}`?")


def _values(source: Source, node: ast.expr, scope: Scope, depth: int) -> set[str]:
    """The event names `node` can hold."""
    if depth > MAX_DEPTH:
        raise UnknownEventName(f"{scope.where(node)}: followed too far")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return (_values(source, node.body, scope, depth)
                | _values(source, node.orelse, scope, depth))
    if isinstance(node, ast.Attribute) and node.attr == "event":
        return set()  # a Log command's name passed on: counted where the Log was made
    if isinstance(node, ast.Attribute) and _called(node.value) == "self" and scope.cls:
        return _attribute_values(source, node.attr, scope, depth)
    if isinstance(node, ast.Attribute):
        return {_imported_str(node, scope)}
    if isinstance(node, ast.Name):
        return _name_values(source, node, scope, depth)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        table = _module_value(node.value, scope)  # the LM's `_END_LINES[why]`
        return {_event(table[key], node, scope)
                for key in _values(source, node.slice, scope, depth + 1)}
    raise UnknownEventName(f"{scope.where(node)}: `{ast.unparse(node)}`")


def _imported_str(node: ast.Attribute, scope: Scope) -> str:
    """`Reason.LOST`: a string constant of a module-level name, read from the module."""
    return _event(_module_value(node, scope), node, scope)


def _module_value(node: ast.Name | ast.Attribute, scope: Scope) -> object:
    """What `name` or `name.attr...` is at the top level of the module it is written in."""
    value: object = importlib.import_module(scope.module)
    try:
        for part in ast.unparse(node).split("."):
            value = getattr(value, part)
    except AttributeError:
        raise UnknownEventName(f"{scope.where(node)}: `{ast.unparse(node)}`") from None
    return value


def _event(value: object, node: ast.AST, scope: Scope) -> str:
    if not isinstance(value, str):
        raise UnknownEventName(f"{scope.where(node)}: `{ast.unparse(node)}` is no string")
    return str(value)  # a StrEnum member as its value


def _name_values(source: Source, node: ast.Name, scope: Scope, depth: int) -> set[str]:
    function = scope.function
    if function is not None:
        assigned = [value for target, value in _assignments(function) if target == node.id]
        if assigned:
            return set().union(*(_values(source, value, scope, depth + 1)
                                 for value in assigned))
        if node.id in _parameters(function):
            return _parameter_values(source, node.id, scope, depth + 1)
    return {_event(_module_value(node, scope), node, scope)}


def _assignments(function: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) for each `name = value` and `for name in (literals)` in a function."""
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(
                node.target, ast.Name) and node.value is not None:
            yield node.target.id, node.value
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            if isinstance(node.iter, ast.Tuple | ast.List):
                for element in node.iter.elts:
                    yield node.target.id, element
            else:
                yield node.target.id, node.iter


def _attribute_values(source: Source, attr: str, scope: Scope, depth: int) -> set[str]:
    """`self.attr`: the values its class assigns it, in any of its methods."""
    found: set[str] = set()
    assigned = False
    for method in scope.cls.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == attr
                    and _called(t.value) == "self" for t in node.targets):
                assigned = True
                found |= _values(source, node.value,
                                 Scope(scope.module, scope.path, method, scope.cls), depth + 1)
    if not assigned:
        raise UnknownEventName(f"{scope.path}: `self.{attr}` is never assigned in "
                               f"{scope.cls.name}")
    return found


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = function.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


def _parameter_values(source: Source, parameter: str, scope: Scope, depth: int) -> set[str]:
    """A parameter's values: those of the argument at every call of its function (a method is
    called on anything but a module; a constructor by its class's name)."""
    function = scope.function
    args = function.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    is_method = scope.cls is not None
    index = positional.index(parameter) - is_method if parameter in positional else None
    default = _default(function, parameter)
    called = scope.cls.name if function.name == "__init__" and is_method else function.name
    found: set[str] = set()
    calls = 0
    for node, caller in source.nodes:
        if not (isinstance(node, ast.Call) and _called(node.func) == called):
            continue
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            receiver = node.func.value.id
            if receiver in source.whole_imports[caller.module]:
                continue
            if (receiver == "self" and caller.cls is not scope.cls
                    and _defines(caller.cls, function.name)):
                continue  # another class's method of the same name
        calls += 1
        given = next((k.value for k in node.keywords if k.arg == parameter), None)
        if given is None and index is not None and index < len(node.args):
            given = node.args[index]
        if given is None:
            given = default
        if given is None:
            raise UnknownEventName(f"{caller.where(node)}: no `{parameter}` given")
        found |= _values(source, given, caller, depth)
    if not calls:
        raise UnknownEventName(f"{scope.where(function)}: `{function.name}` is never called")
    return found


def _defines(cls: ast.ClassDef | None, name: str) -> bool:
    return cls is not None and any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
        for node in cls.body)


def _default(function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str) -> ast.expr | None:
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults,
                            strict=True):
        if arg.arg == parameter:
            return default
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if arg.arg == parameter:
            return default
    return None
