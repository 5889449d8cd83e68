"""The one registry every policy family uses: its policy classes by name.

A family is a decision point of the scheduler (job ordering, fairness, placement, local
queues). Its module defines a `typing.Protocol` for the decision, one `Registry`, and the
policy classes, each registered under the name the federation file selects it by:

    FAIRNESS_POLICIES = Registry("policies.fairness", argument="fairness")

    @FAIRNESS_POLICIES.register("fair_share")
    class FairShare: ...

    FAIRNESS_POLICIES.make("fair_share", queues=queues)

`make` constructs the policy with the keywords its family passes (each family's module says
which; every class of the family accepts them all), `get` hands out the class itself for a
family whose caller makes many instances (a worker makes one local queue per node). An
unknown name is an `InvalidInput` listing the known ones; the federation file's validation
lists the same names (`names()`), so a new policy needs no edit anywhere else.

A family whose policies live in a package of their own names it as `plugins`
(`Registry("policies.job", plugins="common.policies.jobs")`): the registry imports that
package the first time it is asked for a name, and the package imports its modules, which
register as they load. The family's module never imports its policies' modules, which import
it: no import cycle, and no caller has to remember to import them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from common.errors import InvalidInput

PolicyClass = TypeVar("PolicyClass", bound=type)


class Registry(Generic[PolicyClass]):
    """The policies of one family, by name.

    `family` is the family's key in the federation file (`policies.fairness`): the file's
    validation names it when a name is unknown. `argument` is the name the core's
    constructors take the policy name under (`GMConfig.fairness`, the worker's
    `queue_policy`): `make` and `get` name it, since a name reaching them came from code.
    `plugins`: the package that registers the rest of the family's policies when imported,
    imported on the first `names`, `get` or `make`.
    """

    def __init__(self, family: str, *, argument: str | None = None,
                 plugins: str | None = None) -> None:
        self.family = family
        self.argument = argument or family
        self.plugins = plugins
        self._classes: dict[str, PolicyClass] = {}
        self._plugins_imported = plugins is None

    def register(self, name: str) -> Callable[[PolicyClass], PolicyClass]:
        """Class decorator: select the class by `name`, which also becomes its `name`."""

        def add(cls: PolicyClass) -> PolicyClass:
            if name in self._classes:
                raise ValueError(f"{self.family}: {name!r} is registered twice")
            cls.name = name
            self._classes[name] = cls
            return cls

        return add

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._registered()))

    def get(self, name: str) -> PolicyClass:
        """The class registered under `name`."""
        cls = self._registered().get(name)
        if cls is None:
            raise InvalidInput(self.argument, self.unknown(name))
        return cls

    def make(self, name: str, **context: Any) -> Any:
        """A new policy `name`, given the keywords its family passes."""
        return self.get(name)(**context)

    def _registered(self) -> dict[str, PolicyClass]:
        """Every class of the family, its plugins imported first if they are not yet."""
        if not self._plugins_imported:
            importlib.import_module(self.plugins)
            self._plugins_imported = True  # not before: a failed import fails again, loudly
        return self._classes

    def unknown(self, name: object) -> str:
        """What an unknown name is told, wherever it was written."""
        return f"unknown policy {name!r} (known: {', '.join(self.names())})"
