"""Shared fixtures for replay tests: real files on disk under tmp_path."""

from __future__ import annotations

import pytest

SEED_LOG = (
    b'{"source":"A","kind":"insert","start":300000000000}\n'
    b'{"source":"B","kind":"insert","start":0}\n'
    b'{"source":"A","kind":"cti","start":300000000000}\n'
    b'{"source":"B","kind":"cti","start":0}\n'
    b'{"source":"A","kind":"insert","start":420000000000}\n'
    b'{"source":"A","kind":"cti","start":480000000000}\n'
    b'{"source":"B","kind":"insert","start":60000000000}\n'
)


@pytest.fixture
def seed_log(tmp_path):
    path = tmp_path / "seed.jsonl"
    path.write_bytes(SEED_LOG)
    return path
