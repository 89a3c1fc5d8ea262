"""The time-policy protocol, and how the engine finds policies without importing them.

A policy is a pure scan step over a small frozen state (DESIGN §1)::

    state = policy.initial()
    state, outputs = policy.step(state, event)     # one arrival; event.source is the input
    state, outputs = policy.leave(state, source)   # an input left the merge

``outputs`` is a tuple whose items are either ``Event`` (to emit downstream: the event itself,
an adjusted copy, or a new CTI) or ``LateRecord`` (to the late side output). The same policy
object is run element by element (the union, ``cti_sync``, replay), over columns (the columnar
path) and inside Spark; all three must agree.

``engine`` cannot import ``operators`` (layering), so policies are found by name through the
``goldilocks.policies`` entry-point group that the package declares: ``resolve_policy("min")``.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from engine.event import Event, LateRecord

__all__ = ["Policy", "Outputs", "resolve_policy", "policy_names"]

Outputs = tuple  # tuple[Event | LateRecord, ...]

_GROUP = "goldilocks.policies"


@runtime_checkable
class Policy(Protocol):
    """What every time policy provides. ``name``, ``delay`` (ns) and ``on_late`` describe it."""

    name: str
    delay: int
    on_late: str

    def initial(self) -> Any: ...

    def step(self, state: Any, event: Event) -> tuple[Any, Outputs]: ...

    def join(self, state: Any, source: str) -> tuple[Any, Outputs]: ...

    def leave(self, state: Any, source: str) -> tuple[Any, Outputs]: ...


def policy_names() -> list[str]:
    """Names of the installed policies (``goldilocks``, ``min``, ``max``, …)."""
    return sorted(ep.name for ep in entry_points(group=_GROUP))


def resolve_policy(name: str, **options: Any) -> Policy:
    """Build the policy registered under ``name`` with ``options`` (``delay``, ``on_late``)."""
    found = [ep for ep in entry_points(group=_GROUP) if ep.name == name]
    if not found:
        raise ValueError(
            f"unknown policy {name!r}; expected one of {', '.join(policy_names()) or '(none installed)'}"
        )
    factory = found[0].load()
    return factory(**options)


# re-exported for type checkers of implementers
_ = LateRecord
