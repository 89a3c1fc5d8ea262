"""Fixtures for the network tests (helpers live in ``netsupport``)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["ws", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    """Each test taking it runs over WebSocket and over TCP."""
    return request.param
