"""The Python API as asyncio users meet it: what ``subscribe`` refuses, ``async for`` over any
publisher (and leaving it early), producers started together with ``asyncio.gather``, and
the union's stats once it has ended.

Everything runs on a real asyncio loop (``asyncio.run``); nothing sleeps to let things happen.
"""

from __future__ import annotations

import pytest

from engine import CallbackSubscriber, from_iterable
from operators import Union, goldilocks


# ------------------------------------------------------------------------------ subscribe
def test_subscribing_a_function_raises_type_error_that_names_the_fix():
    union = Union(goldilocks("5m"))
    with pytest.raises(TypeError) as caught:
        union.subscribe(print)
    message = str(caught.value)
    assert "RS §1.9" in message and "on_subscribe" in message
    assert "CallbackSubscriber(print)" in message
    union.subscribe(CallbackSubscriber(lambda event: None))  # the slot is still free


def test_subscribing_a_subscriber_class_asks_for_an_instance():
    with pytest.raises(TypeError, match=r"the class CallbackSubscriber; pass an instance"):
        from_iterable([1]).subscribe(CallbackSubscriber)
