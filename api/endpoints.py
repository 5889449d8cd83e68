"""Where every service listens: one table from service id to base URL.

It comes from the environment (`MEGHA_ENDPOINTS="gm-1=http://gm-1:8000,lm-1=http://..."`),
so the same federation file serves local processes (ports on 127.0.0.1) and containers
(service names). Worker ids contain a slash (`lm-1/w0`); that is fine here. The services read
it to find each other, `megha replay` to find the GMs.
"""

from __future__ import annotations

import os

from common.errors import InvalidInput

ENV = "MEGHA_ENDPOINTS"


class Endpoints:
    def __init__(self, table: dict[str, str]) -> None:
        self.table = dict(table)

    @classmethod
    def parse(cls, text: str) -> Endpoints:
        table: dict[str, str] = {}
        for index, item in enumerate(part.strip() for part in text.split(",")):
            if not item:
                continue
            name, sep, url = item.partition("=")
            if not sep or not name.strip() or not url.strip().startswith(("http://", "https://")):
                raise InvalidInput(f"{ENV}[{index}]", f"expected id=http://host:port, got {item!r}")
            table[name.strip()] = url.strip().rstrip("/")
        return cls(table)

    @classmethod
    def from_env(cls) -> Endpoints:
        return cls.parse(os.environ.get(ENV, ""))

    def url(self, service: str) -> str:
        try:
            return self.table[service]
        except KeyError:
            known = ", ".join(sorted(self.table)) or "none"
            raise InvalidInput(ENV, f"no address for {service!r} (known: {known})") from None

    def render(self) -> str:
        return ",".join(f"{name}={url}" for name, url in self.table.items())
