"""Where drain loops run: the calling thread, a ``concurrent.futures.Executor``, or an asyncio loop.

All three are adapted to one tiny interface, ``execute(task)``: run ``task()`` (a callable with
no arguments that never raises) soon, or raise ``RejectedError``. The asynchronous boundary is
the user's choice, as the specification intends.

``INLINE`` runs tasks on the calling thread through a per-thread trampoline: a task scheduled
while another task runs on the same thread is queued and run after it, never nested. Together
with each subscription's work-in-progress counter this bounds the recursion between
``request`` and ``on_next`` to depth 1 (RS §3.3) across whole pipelines, not just one hop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from engine.errors import RejectedError

__all__ = ["Executor", "InlineExecutor", "Trampoline", "PoolExecutor", "LoopExecutor", "INLINE",
           "as_executor"]

_log = logging.getLogger("goldilocks.executors")

Task = Callable[[], None]


@runtime_checkable
class Executor(Protocol):
    def execute(self, task: Task) -> None:
        """Run ``task`` soon; raise ``RejectedError`` if that is impossible."""


class Trampoline:
    """One thread's trampoline: ``running`` while a task runs on the thread; ``queue``, the
    tasks scheduled meanwhile, run after it in order (kept for the thread's life, so running a
    task allocates nothing)."""

    __slots__ = ("running", "queue")

    def __init__(self) -> None:
        self.running = False
        self.queue: deque[Task] = deque()

    def run_queued(self) -> None:
        """Run the tasks scheduled while this thread's task ran (and any they schedule), then
        mark the thread idle; tasks never raise, and if one does the rest are dropped."""
        queue = self.queue
        try:
            while queue:
                queue.popleft()()
        except BaseException:
            queue.clear()
            raise
        finally:
            self.running = False


class InlineExecutor:
    """Runs tasks on the calling thread, trampolined (see the module docstring)."""

    __slots__ = ("local",)

    def __init__(self) -> None:
        self.local = threading.local()  # .trampoline: the thread's, once it ran a task

    def here(self) -> Trampoline:
        """The calling thread's trampoline (``local.trampoline``, made on first use). A
        caller that finds it idle may run a task of its own in place, as ``execute`` would:
        set ``running``, run it, then ``run_queued()`` (the fast paths that skip scheduling
        a drain do so)."""
        try:
            return self.local.trampoline
        except AttributeError:
            trampoline = self.local.trampoline = Trampoline()
            return trampoline

    def execute(self, task: Task) -> None:
        trampoline = self.here()
        if trampoline.running:  # already inside a task on this thread: run it after, not nested
            trampoline.queue.append(task)
            return
        trampoline.running = True
        try:
            task()
        except BaseException:
            trampoline.queue.clear()
            trampoline.running = False
            raise
        trampoline.run_queued()

    def __repr__(self) -> str:
        return "INLINE"


INLINE = InlineExecutor()


def _run_logged(task: Task) -> None:
    try:
        task()
    except BaseException:  # tasks never raise; if one does, it is a bug here: say so loudly
        _log.exception("internal error in a scheduled task")
        raise


def _run_dropped(task: Task, future: concurrent.futures.Future[None]) -> None:
    """A queued task was cancelled by ``shutdown(cancel_futures=True)``: nobody would run it,
    and the subscription that scheduled it would wait forever holding its drain counter. Run
    it once on a fresh thread instead (not here: this callback runs under the pool's shutdown
    lock); whatever it schedules next is rejected and turned into ``on_error`` as usual."""
    if future.cancelled():
        threading.Thread(target=_run_logged, args=(task,), name="goldilocks-rejected",
                         daemon=True).start()


class PoolExecutor:
    """Adapts any ``concurrent.futures.Executor``; a shut-down pool raises ``RejectedError``.

    A task the pool accepted but then dropped (``shutdown(cancel_futures=True)``) still runs,
    once, on a fresh thread, so the subscriber learns of the shutdown instead of hanging.
    """

    __slots__ = ("pool",)

    def __init__(self, pool: concurrent.futures.Executor) -> None:
        self.pool = pool

    def execute(self, task: Task) -> None:
        try:
            future = self.pool.submit(_run_logged, task)
        except RuntimeError as err:  # "cannot schedule new futures after shutdown"
            raise RejectedError(f"executor {self.pool!r} rejected a task: {err}") from err
        future.add_done_callback(functools.partial(_run_dropped, task))

    def __repr__(self) -> str:
        return f"PoolExecutor({self.pool!r})"


class LoopExecutor:
    """Adapts an asyncio event loop: tasks run on the loop's thread via ``call_soon_threadsafe``."""

    __slots__ = ("loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def execute(self, task: Task) -> None:
        if self.loop.is_closed():
            raise RejectedError(f"event loop {self.loop!r} is closed")
        try:
            self.loop.call_soon_threadsafe(_run_logged, task)
        except RuntimeError as err:
            raise RejectedError(f"event loop {self.loop!r} rejected a task: {err}") from err

    def __repr__(self) -> str:
        return f"LoopExecutor({self.loop!r})"


def as_executor(executor: object) -> Executor:
    """``None`` → ``INLINE``; a ``concurrent.futures.Executor`` or an asyncio loop → adapted;
    anything with ``execute(task)`` → itself."""
    if executor is None:
        return INLINE
    if isinstance(executor, concurrent.futures.Executor):
        return PoolExecutor(executor)
    if isinstance(executor, asyncio.AbstractEventLoop):
        return LoopExecutor(executor)
    if callable(getattr(executor, "execute", None)):
        return executor  # type: ignore[return-value]
    raise TypeError(
        f"executor must be None, a concurrent.futures.Executor, an asyncio event loop or an "
        f"object with execute(task); got {type(executor).__name__}"
    )
