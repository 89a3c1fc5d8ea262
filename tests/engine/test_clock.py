"""``WallClock.call_at`` never calls back on the caller's stack: the union schedules its
idleness alarm while holding its intake lock, and the alarm takes that lock (TS §4.7)."""

from __future__ import annotations

import threading

from engine.clock import WALL


def test_a_call_already_due_runs_on_another_thread_after_the_callers_lock_is_released():
    lock = threading.Lock()  # not reentrant, as the union's intake lock
    ran = threading.Event()
    where: list[threading.Thread] = []

    def alarm() -> None:
        with lock:
            where.append(threading.current_thread())
        ran.set()

    def schedule() -> None:
        with lock:
            WALL.call_at(WALL.now() - 1, alarm)  # due already: a late review's alarm

    caller = threading.Thread(target=schedule, daemon=True)
    caller.start()
    caller.join(5)
    assert not caller.is_alive(), "call_at ran the alarm under the caller's lock: deadlock"
    assert ran.wait(5) and where[0] is not caller
