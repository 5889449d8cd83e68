"""The scheduling core: plain Python that does no I/O (docs/architecture.md, One core, three
drivers).

Every role (GM, LM, worker agent) is a state object with one entry point,
`handle(event, now) -> list[Command]`. The services, the simulator and the tests are
drivers that turn wire messages or simulated deliveries into events and carry out the
commands that come back.
"""
