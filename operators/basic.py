"""``map``, ``filter``, ``scan``: per-element operators for ``pipe``, built on ``step_operator``.

>>> from engine import collect, from_iterable, pipe
>>> collect(pipe(from_iterable(range(5)), map(lambda x: x * 10), filter(lambda x: x > 10)))
[20, 30, 40]
>>> collect(pipe(from_iterable([1, 2, 3]), scan(lambda acc, x: acc + x, 0)))
[1, 3, 6]

Each subscription gets its own state (``scan``'s accumulator starts afresh). Memory per
subscription: O(``prefetch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.contracts import Publisher
from engine.stage import step_operator

# the names shadow the builtins map and filter on purpose: they are operators for ``pipe``
__all__ = ["map", "filter", "scan"]

_NOTHING: tuple[()] = ()


def map(fn: Callable[[Any], Any], *, prefetch: int = 64) -> Callable[[Publisher], Publisher]:
    """Emit ``fn(x)`` for each element ``x``; an exception from ``fn`` fails the stream."""
    if not callable(fn):
        raise TypeError("map() requires a callable")

    def make_step() -> Callable[[Any], tuple[Any, ...]]:
        def step(item: Any) -> tuple[Any, ...]:
            return (fn(item),)
        return step

    return step_operator(make_step, name=f"map({getattr(fn, '__name__', 'fn')})",
                         prefetch=prefetch)


def filter(predicate: Callable[[Any], bool], *,
           prefetch: int = 64) -> Callable[[Publisher], Publisher]:
    """Emit the elements for which ``predicate`` is true."""
    if not callable(predicate):
        raise TypeError("filter() requires a callable")

    def make_step() -> Callable[[Any], tuple[Any, ...]]:
        def step(item: Any) -> tuple[Any, ...]:
            return (item,) if predicate(item) else _NOTHING
        return step

    return step_operator(make_step, name=f"filter({getattr(predicate, '__name__', 'fn')})",
                         prefetch=prefetch)


def scan(fn: Callable[[Any, Any], Any], initial: Any, *,
         prefetch: int = 64) -> Callable[[Publisher], Publisher]:
    """Emit the running accumulation ``acc = fn(acc, x)``, starting from ``initial`` afresh for
    every subscription."""
    if not callable(fn):
        raise TypeError("scan() requires a callable")

    def make_step() -> Callable[[Any], tuple[Any, ...]]:
        accumulator = initial

        def step(item: Any) -> tuple[Any, ...]:
            nonlocal accumulator
            accumulator = fn(accumulator, item)
            return (accumulator,)
        return step

    return step_operator(make_step, name=f"scan({getattr(fn, '__name__', 'fn')})",
                         prefetch=prefetch)

