"""The ledger of positions: what each device has given the server, what is durable, who is
told, and the bound on the devices not publishing."""

from __future__ import annotations

import pytest

from goldilocks.net.ledger import Ledger
from operators.checkpoint import CheckpointError


def test_positions_become_durable_only_when_committed_and_watchers_are_told():
    ledger = Ledger()
    told: list[int] = []
    everyone: list[dict] = []
    stop = ledger.watch("a", told.append)
    ledger.listen(everyone.append)
    ledger.take("a", 10)
    ledger.take("b", 3)
    assert (ledger.position("a"), ledger.durable("a")) == (10, 0)
    cut = ledger.snapshot()
    ledger.take("a", 5)  # after the cut: not in this commit
    assert ledger.committed(cut) == {"a": 10, "b": 3}
    assert told == [10] and everyone == [{"a": 10, "b": 3}]
    assert ledger.committed(ledger.snapshot()) == {"a": 15}  # only what advanced
    stop()
    ledger.take("a", 1)
    ledger.committed(ledger.snapshot())
    assert told == [10, 15]


def test_devices_not_publishing_are_forgotten_beyond_the_bound_oldest_first():
    ledger = Ledger(keep=2)
    ledger.watch("busy", lambda p: None)
    for name in ("old", "mid", "new"):
        ledger.take(name, 1)
    ledger.take("busy", 1)
    assert sorted(ledger.snapshot()) == ["busy", "mid", "new"]
    assert ledger.position("old") == 0 and ledger.forgotten == 1


def test_a_checkpoints_positions_are_taken_and_durable():
    ledger = Ledger()
    ledger.load({"a": 7}, "ckpt")
    assert (ledger.position("a"), ledger.durable("a")) == (7, 7)
    with pytest.raises(CheckpointError, match="ckpt: malformed device positions"):
        ledger.load({"a": -1}, "ckpt")
