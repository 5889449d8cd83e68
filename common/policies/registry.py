"""The one registry every policy family uses: its policy classes by name, and its options.

A family is a decision point of the scheduler (job ordering, fairness, placement, local
queues, copies). Its module defines a `typing.Protocol` for the decision, the family's options
(one frozen dataclass, with today's defaults), one `Registry`, and the policy classes, each
registered under the name the federation file selects it by:

    FAIRNESS_POLICIES = Registry("policies.fairness", options=FairnessOptions,
                                 argument="fairness")

    @FAIRNESS_POLICIES.register("fair_share")
    class FairShare: ...

    FAIRNESS_POLICIES.make("fair_share", options, queues=queues)

Options reach a policy one way: `make` passes them as the one keyword `options=` (the
policy's defaults when None), beside the context its family passes (each family's module says
which; every class of the family accepts it all); `get` hands out the class itself for a family
whose caller makes many instances (a worker makes one local queue per node), and the caller
makes each with `options=` (`defaults(name)` when it has none). The federation file's tables
(`common/federation.py`) validate what the file says and `resolve()` it into the family's
options; this module and the families never import the file's models. An unknown name is an
`InvalidInput` listing the known ones; the federation file's validation lists the same names
(`names()`), so a new policy needs no edit anywhere else.

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
    imported on the first `names`, `get` or `make`. `options`: the family's options type,
    whose defaults (`options()`) a policy gets when it is given none and declares no
    `defaults` of its own. A family without one (the simulator's models, machine allocation
    and packing, until they declare theirs) gets from `make` only the keywords it is given.
    """

    def __init__(self, family: str, *, options: type | None = None,
                 argument: str | None = None, plugins: str | None = None) -> None:
        self.family = family
        self.options = options
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

    def defaults(self, name: str) -> Any:
        """The options policy `name` gets when it is given none: its own `defaults` if it
        declares them (a fairness policy does: the paper's differ from today's), else the
        family's."""
        own = getattr(self.get(name), "defaults", None)
        return own if own is not None else self.options()

    def make(self, name: str, options: Any = None, **context: Any) -> Any:
        """A new policy `name`, made with `options` (its defaults when None) and the
        keywords its family passes."""
        cls = self.get(name)
        if self.options is None:  # a family that declares no options type: as it is given
            return cls(**context) if options is None else cls(options=options, **context)
        return cls(options=self.defaults(name) if options is None else options, **context)

    def _registered(self) -> dict[str, PolicyClass]:
        """Every class of the family, its plugins imported first if they are not yet."""
        if not self._plugins_imported:
            importlib.import_module(self.plugins)
            self._plugins_imported = True  # not before: a failed import fails again, loudly
        return self._classes

    def unknown(self, name: object) -> str:
        """What an unknown name is told, wherever it was written."""
        return f"unknown policy {name!r} (known: {', '.join(self.names())})"
