"""Reading ahead: the next chunks of a replay are read and parsed on a helper thread.

Reading, scanning and merging (mostly file reads and numpy, which release the GIL) then
overlap the policy and the writing on a second core. The chunks, their order and any error
are exactly those of the source (an error is raised after the chunks before it), so the
output does not change (TS §5.1).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Generator, Iterable

__all__ = ["ahead"]


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


def ahead(chunks: Iterable[Any], depth: int = 2) -> Generator[Any, None, None]:
    """Iterate ``chunks`` while a helper thread reads and parses the next ones. Memory: at
    most ``depth`` chunks waiting plus the one being read. Closing this generator stops the
    helper, which closes ``chunks``."""
    waiting: queue.Queue[Any] = queue.Queue(depth)
    stop = threading.Event()

    def produce() -> None:
        last: object = _DONE
        try:
            for chunk in chunks:
                if stop.is_set():
                    break
                waiting.put(chunk)
        except BaseException as err:  # handed to the consumer and raised there, in order
            last = _Raised(err)
        finally:
            try:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
            finally:
                waiting.put(last)  # always the helper's final item

    helper = threading.Thread(target=produce, name="goldilocks-replay-read", daemon=True)
    helper.start()
    item: object = None
    try:
        while True:
            item = waiting.get()
            if item is _DONE:
                return
            if item.__class__ is _Raised:
                raise item.error
            yield item
            item = None
    finally:
        stop.set()
        while item is not _DONE and item.__class__ is not _Raised:
            item = waiting.get()  # room for the helper until its final item
        helper.join()
