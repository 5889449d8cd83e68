"""Every policy family has the same shape: a Protocol, an options type, a registry, registered
classes that implement the Protocol and are made with the family's options, refusals that name
the known choices, in code and in the file."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from one_gm_federation import one_gm_file

import common.policies
import simulator.models
from common.errors import InvalidInput
from common.federation import Policies, load_federation
from common.gm_config import GMConfig
from common.lm import LocalMaster
from common.policies.fairness import UserQueue
from common.policies.registry import Registry
from common.worker import WorkerAgent

FAMILIES = ("policies.fairness", "policies.job", "policies.local_queue", "policies.placement",
            "policies.redundancy.policy", "redundancy experiment", "packing experiment")
# Families only the simulator's own models choose, not a federation file (simulator/models/): the
# SRPT+R paper's machine allocation runs in simulator/redundancy.py (the LMs' copies are the other
# family); the packing paper's schedulers in simulator/packing.py (the GM's side: the lp, psrs and
# wspt job policies, the tetris placement and per-task placement sets).
SIMULATOR_ONLY = {"redundancy experiment", "packing experiment"}

# What each family's `make` passes beside the options (a family module's docstring says so);
# the local queue family hands out classes (`get`), made with the options alone.
CONTEXT = {"policies.fairness": {"queues": [UserQueue("a", 1.0, "g1")]}}
# How the federation file gives each family its options: the tables' `resolve()`, defaults
# and all (placement has no table: its options are empty).
FILE_OPTIONS = {
    "policies.job": lambda policies: policies.job_options(),
    "policies.fairness": lambda policies: policies.fairness_options.resolve(policies.fairness),
    "policies.local_queue": lambda policies: policies.local_queues.resolve(),
    "policies.redundancy.policy": lambda policies: policies.redundancy.resolve(),
}

def policies_file(line: str) -> str:
    return one_gm_file(f"[policies]\n{line}")


def family_modules() -> list[ModuleType]:
    """The modules that define a family: its Protocol and its registry (a folder of a
    family may hold several, and modules that register into another's registry)."""
    modules = [importlib.import_module(info.name)
               for package in (common.policies, simulator.models)
               for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")]
    return [module for module in modules if registries_of(module) and protocols_of(module)]


def registries_of(module: ModuleType) -> list[Registry]:
    return [value for value in vars(module).values() if isinstance(value, Registry)]


def protocols_of(module: ModuleType) -> list[type]:
    return [value for value in vars(module).values()
            if inspect.isclass(value) and getattr(value, "_is_protocol", False)
            and value.__module__ == module.__name__]


def members(protocol: type) -> tuple[list[str], dict[str, inspect.Signature]]:
    """The Protocol's attributes and its methods (with their signatures)."""
    attributes = list(getattr(protocol, "__annotations__", {}))
    methods = {name: inspect.signature(value) for name, value in vars(protocol).items()
               if inspect.isfunction(value)
               and value.__qualname__.startswith(f"{protocol.__qualname__}.")}
    return attributes, methods


MODULES = family_modules()
ids = [module.__name__.removeprefix("common.policies.").removeprefix("simulator.models.")
       for module in MODULES]


def test_every_family_is_found_once() -> None:
    families = sorted(registries_of(module)[0].family for module in MODULES)
    assert families == sorted(FAMILIES)
    assert all(len(registries_of(module)) == 1 for module in MODULES)


@pytest.mark.parametrize("module", MODULES, ids=ids)
def test_a_family_has_one_protocol_that_its_classes_implement(module: ModuleType) -> None:
    protocols = protocols_of(module)
    assert len(protocols) == 1, protocols
    attributes, methods = members(protocols[0])
    assert "name" in attributes and methods
    registry = registries_of(module)[0]
    assert registry.names()
    for name in registry.names():
        cls = registry.get(name)
        assert cls.name == name
        for attribute in attributes:
            if attribute != "options":  # an instance's: checked where the policies are made
                assert hasattr(cls, attribute), (cls, attribute)
        for method, signature in methods.items():
            implemented = getattr(cls, method, None)
            assert callable(implemented), (cls, method)
            assert list(inspect.signature(implemented).parameters) == list(
                signature.parameters), (cls, method)


@pytest.mark.parametrize("module", MODULES, ids=ids)
def test_a_family_declares_one_options_type_of_frozen_defaults(module: ModuleType) -> None:
    registry = registries_of(module)[0]
    options = registry.options
    assert options is not None and options.__module__ == module.__name__
    assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen
    options()  # every field has today's default
    # the family's Protocol says that every policy keeps the options it was made with
    attributes = getattr(protocols_of(module)[0], "__annotations__", {})
    assert attributes.get("options") == options.__name__


@pytest.mark.parametrize("module", MODULES, ids=ids)
def test_every_policy_is_made_with_the_family_options_and_what_it_passes(
        module: ModuleType) -> None:
    registry = registries_of(module)[0]
    context = CONTEXT.get(registry.family, {})
    for name in registry.names():
        policy = registry.make(name, **context)
        assert isinstance(policy, registry.get(name)) and policy.name == name
        assert "options" in inspect.signature(registry.get(name)).parameters, name
        # none given: the policy's defaults (the family's, unless it declares its own)
        assert policy.options == registry.defaults(name)
        assert isinstance(policy.options, registry.options)
        given = registry.options()  # a new instance: the policy must keep this one
        assert registry.make(name, given, **context).options is given, name
        # as a caller of `get` makes them: the one keyword `options=`
        assert registry.get(name)(options=given, **context).options is given, name


@pytest.mark.parametrize("family", sorted(FILE_OPTIONS))
def test_the_federation_file_resolves_each_family_options_with_the_same_defaults(
        family: str) -> None:
    """The file's tables and the families' options types both state today's defaults: a
    file that sets nothing gives each policy exactly the defaults it gets in code."""
    registry = next(registries_of(module)[0] for module in MODULES
                    if registries_of(module)[0].family == family)
    policies = Policies()
    resolved = FILE_OPTIONS[family](policies)
    assert isinstance(resolved, registry.options)
    chosen = getattr(policies, family.split(".")[1])
    name = chosen if isinstance(chosen, str) else chosen.policy
    assert resolved == registry.defaults(name)


@pytest.mark.parametrize("module", MODULES, ids=ids)
def test_an_unknown_name_is_refused_naming_the_known_ones(module: ModuleType) -> None:
    registry = registries_of(module)[0]
    known = ", ".join(registry.names())
    for call in (lambda: registry.get("no_such_policy"),
                 lambda: registry.make("no_such_policy", **CONTEXT.get(registry.family, {}))):
        with pytest.raises(InvalidInput) as caught:
            call()
        assert caught.value.field == registry.argument
        assert caught.value.message == f"unknown policy 'no_such_policy' (known: {known})"
    if registry.family in SIMULATOR_ONLY:
        return
    # the argument a refusal names is where the core takes the policy's name
    assert (registry.argument in GMConfig.__dataclass_fields__
            or registry.argument in inspect.signature(WorkerAgent).parameters
            or registry.argument in inspect.signature(LocalMaster).parameters)


@pytest.mark.parametrize("module", MODULES, ids=ids)
def test_the_federation_file_offers_the_registered_names(module: ModuleType) -> None:
    registry = registries_of(module)[0]
    if registry.family in SIMULATOR_ONLY:
        pytest.skip(f"{registry.family} is not chosen in a federation file yet")
    section, key, *field = registry.family.split(".")
    assert section == "policies" and key in Policies.model_fields

    def line(name: str) -> str:  # a key of [policies], or of a table of it (inline)
        return f'{key} = "{name}"' if not field else f'{key} = {{ {field[0]} = "{name}" }}'

    def chosen(federation) -> str:
        value = getattr(federation.policies, key)
        return getattr(value, field[0]) if field else value

    for name in registry.names():
        assert chosen(load_federation(policies_file(line(name)))) == name
    with pytest.raises(InvalidInput) as caught:
        load_federation(policies_file(line("no_such_policy")))
    assert caught.value.field == registry.family
    assert f"(known: {', '.join(registry.names())})" in caught.value.message


def test_a_name_registered_twice_is_a_mistake() -> None:
    registry = Registry("policies.example")
    registry.register("one")(type("One", (), {}))
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("one")(type("Other", (), {}))
    assert registry.argument == "policies.example"  # code and file name the same key


def test_a_family_imports_its_plugins_when_first_asked(tmp_path: Path, monkeypatch) -> None:
    """A family's module does not import the package of its other policies, whose modules
    import it (a cycle); its registry does, on the first `names`, `get` or `make`."""
    (tmp_path / "example_family.py").write_text(
        "from common.policies.registry import Registry\n"
        "EXAMPLES = Registry('policies.example', plugins='example_plugins')\n"
        "@EXAMPLES.register('built_in')\n"
        "class BuiltIn: ...\n")
    (tmp_path / "example_plugins").mkdir()
    (tmp_path / "example_plugins" / "__init__.py").write_text(
        "from example_plugins import extra\n")
    (tmp_path / "example_plugins" / "extra.py").write_text(
        "from example_family import EXAMPLES\n"
        "@EXAMPLES.register('extra')\n"
        "class Extra: ...\n")
    monkeypatch.syspath_prepend(tmp_path)
    try:
        family = importlib.import_module("example_family")
        assert "example_plugins" not in sys.modules
        assert family.EXAMPLES.names() == ("built_in", "extra")
        assert family.EXAMPLES.get("extra").__module__ == "example_plugins.extra"
    finally:
        for name in ("example_family", "example_plugins", "example_plugins.extra"):
            sys.modules.pop(name, None)


def registering_modules(package: Path, registry_name: str) -> set[str]:
    """The modules of a plugins package with a class decorated `@<registry>.register(...)`."""
    found = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                    and d.func.attr == "register" and isinstance(d.func.value, ast.Name)
                    and d.func.value.id == registry_name for d in node.decorator_list):
                found.add(path.stem)
    return found


def imported_by(init: Path, package: str) -> set[str]:
    """The modules of `package` its `__init__.py` imports."""
    found = set()
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name.removeprefix(f"{package}.") for alias in node.names)
    return found


PLUGGED = [module for module in MODULES if registries_of(module)[0].plugins]


@pytest.mark.parametrize("module", PLUGGED,
                         ids=[registries_of(module)[0].plugins for module in PLUGGED])
def test_a_plugins_package_imports_every_module_that_registers_a_policy(
        module: ModuleType) -> None:
    """A module of the plugins package left out of its `__init__.py` would register nothing:
    its policies would be unknown names."""
    registry = registries_of(module)[0]
    name = next(key for key, value in vars(module).items() if value is registry)
    package = Path(importlib.import_module(registry.plugins).__file__).parent
    registering = registering_modules(package, name)
    assert registering, f"{registry.plugins} registers no {name} policy"
    assert registering <= imported_by(package / "__init__.py", registry.plugins)
