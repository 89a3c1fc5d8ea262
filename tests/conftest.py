"""Suite-wide fixtures: every test runs strict about Reactive Streams violations.

A violation reported through ``engine.violations`` during a test fails that test, unless the
test takes the ``violations`` fixture and inspects the list itself (then it owns them).
"""

from __future__ import annotations

import pytest

from engine.violations import collect_violations


@pytest.fixture(autouse=True)
def _strict_violations(request: pytest.FixtureRequest):
    with collect_violations() as found:
        request.node._violations = found
        yield found
    if "violations" in request.fixturenames:
        return
    if found:
        lines = "\n".join(f"  {v}" for v in found)
        pytest.fail(f"{len(found)} Reactive Streams violation(s) reported:\n{lines}",
                    pytrace=False)


@pytest.fixture
def violations(_strict_violations):
    """The violations reported during this test; taking it means the test checks them."""
    return _strict_violations
