"""The rules of the Reactive Streams specification, and how kit tests are tied to them.

``RULES`` maps every rule id (``"1.1"`` … ``"4.2"``) to a one-line summary. A kit test is a
method named ``test_rs_<x>_<y>_<what>`` decorated with ``@rule("x.y", …)``; the decorator
runs it under a ``Session`` that owns every probe it makes and every violation reported through
``engine.violations`` while it runs, and fails the test if a probe saw a protocol error or a
violation was reported that the test did not allow. A rule that cannot be tested generically
gets ``untested("x.y", reason)``: a method that skips with that reason, so the gap is visible
in every run and in ``docs/conformance.md``.

Skipping uses ``unittest.SkipTest``, which pytest and unittest both understand; nothing here
needs pytest.
"""

from __future__ import annotations

import functools
import threading
import time
import unittest
from collections.abc import Callable
from typing import Any, NoReturn

from engine.violations import Violation, set_violation_handler

__all__ = ["RULES", "rule", "untested", "skip", "Session", "current_session", "rule_ids_of"]

RULES: dict[str, str] = {
    "1.1": "onNext count never exceeds the total requested",
    "1.2": "may signal fewer onNext than requested and terminate",
    "1.3": "onSubscribe/onNext/onError/onComplete are signalled serially",
    "1.4": "a failed publisher signals onError",
    "1.5": "a finite stream that ends successfully signals onComplete",
    "1.6": "after onError/onComplete the subscription is considered cancelled",
    "1.7": "no signals after a terminal signal",
    "1.8": "a cancelled subscription eventually stops being signalled",
    "1.9": "subscribe calls onSubscribe first, returns normally, raises only for None "
           "(in Python: for anything that is not a subscriber)",
    "1.10": "subscribe may be called many times, with a different subscriber each time",
    "1.11": "a publisher may support multiple subscribers (unicast or multicast)",
    "2.1": "a subscriber signals demand with request(n) to receive onNext",
    "2.2": "a subscriber that would obstruct its publisher should dispatch asynchronously",
    "2.3": "onComplete/onError must not call the subscription or the publisher",
    "2.4": "onComplete/onError mean the subscription is cancelled",
    "2.5": "a subscriber with an active subscription cancels a second one",
    "2.6": "a subscriber cancels a subscription it no longer needs",
    "2.7": "a subscriber calls request and cancel serially",
    "2.8": "a subscriber accepts onNext after cancel while demand is pending",
    "2.9": "a subscriber accepts onComplete with or without a preceding request",
    "2.10": "a subscriber accepts onError with or without a preceding request",
    "2.11": "signal calls happen-before their processing",
    "2.12": "onSubscribe is called at most once per subscriber",
    "2.13": "signal methods return normally, raise only for None; a raising subscriber is "
            "cancelled and the error raised in a fashion fit for the runtime",
    "3.1": "request and cancel are only called inside the subscriber's context",
    "3.2": "request may be called synchronously from onNext and onSubscribe",
    "3.3": "request bounds the synchronous recursion between publisher and subscriber",
    "3.4": "request returns in a timely manner",
    "3.5": "cancel is timely, idempotent and thread-safe",
    "3.6": "after cancel, request is a NOP",
    "3.7": "after cancel, cancel is a NOP",
    "3.8": "request(n) registers n more elements of demand",
    "3.9": "request(n <= 0) signals onError with an illegal-argument error",
    "3.10": "request may call onNext synchronously",
    "3.11": "request may call onComplete or onError synchronously",
    "3.12": "cancel asks the publisher to eventually stop signalling",
    "3.13": "cancel makes the publisher eventually drop its references to the subscriber",
    "3.14": "cancel may shut a stateful publisher down when no other subscription exists",
    "3.15": "cancel returns normally",
    "3.16": "request returns normally",
    "3.17": "demand up to 2**63-1 is supported, from any number of requests",
    "4.1": "a processor obeys both the publisher and the subscriber contracts",
    "4.2": "a processor recovering from onError considers the subscription cancelled; "
           "otherwise it propagates onError to its subscribers immediately",
}


def skip(reason: str) -> NoReturn:
    """Skip the running kit test (shown as a skip with ``reason``)."""
    raise unittest.SkipTest(reason)


def rule_ids_of(method: object) -> tuple[str, ...]:
    return getattr(method, "rs_rules", ())


# --------------------------------------------------------------------------- the session
_local = threading.local()


def current_session() -> Session:
    session = getattr(_local, "session", None)
    if session is None:
        raise RuntimeError("kit helpers must run inside a @rule test")
    return session


class Session:
    """What one kit test owns: its probes and the violations reported while it runs.

    Violations are gathered by a handler installed for the duration of the test (so a test that
    provokes one on purpose can wait for it with ``wait_violation``); at the end, each probe is
    checked and any violation whose rule the test did not ``allow`` fails the test.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.violations: list[Violation] = []
        self.probes: list[Any] = []
        self.allowed: set[str] = set()
        self._previous: Callable[[Violation], None] | None = None

    def __enter__(self) -> Session:
        self._previous = set_violation_handler(self._record)
        _local.session = self
        return self

    def __exit__(self, *exc: object) -> None:
        _local.session = None
        set_violation_handler(self._previous)

    def _record(self, violation: Violation) -> None:
        with self._cond:
            self.violations.append(violation)
            self._cond.notify_all()

    def allow(self, *rules: str) -> None:
        """Violations of these rules (``"RS §2.5"``) are expected in this test."""
        self.allowed.update(rules)

    def wait_violation(self, rule: str, timeout: float) -> Violation:
        """Wait until a violation of ``rule`` is reported; fail after ``timeout`` seconds."""
        self.allow(rule)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for violation in self.violations:
                    if violation.rule == rule:
                        return violation
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"expected a {rule} violation to be reported through "
                        f"engine.violations within {timeout} s; got "
                        f"{[str(v) for v in self.violations] or 'none'}")
                self._cond.wait(remaining)

    def problems(self) -> str:
        """Every problem the session's probes saw, as one message ('' if none)."""
        found = []
        for probe in self.probes:
            try:
                probe.check()
            except AssertionError as err:
                found.append(str(err))
        return "; ".join(found)

    def verify(self) -> None:
        for probe in self.probes:
            probe.check()
        with self._cond:
            unexpected = [v for v in self.violations if v.rule not in self.allowed]
        if unexpected:
            lines = "\n".join(f"  {v}" for v in unexpected)
            raise AssertionError(f"unexpected violation(s) reported:\n{lines}")


def rule(*ids: str) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    """Tie a kit test to the rules it checks and run it under a ``Session``."""
    for rule_id in ids:
        if rule_id not in RULES:
            raise ValueError(f"unknown Reactive Streams rule {rule_id!r}")

    def mark(test: Callable[[Any], None]) -> Callable[[Any], None]:
        @functools.wraps(test)
        def run(self: Any) -> None:
            with Session() as session:
                try:
                    test(self)
                except AssertionError as err:
                    found = session.problems()
                    if found:  # the protocol problems are the cause; say them first
                        raise AssertionError(f"{found}\n(and then: {err})") from err
                    raise
            session.verify()

        run.rs_rules = ids  # type: ignore[attr-defined]
        return run

    return mark


def untested(rule_id: str, reason: str) -> Callable[[Any], None]:
    """A test method that records why ``rule_id`` cannot be tested generically, as a skip."""
    if rule_id not in RULES:
        raise ValueError(f"unknown Reactive Streams rule {rule_id!r}")

    def test(self: Any) -> None:
        skip(f"RS §{rule_id} untested: {reason}")

    test.rs_rules = (rule_id,)  # type: ignore[attr-defined]
    test.rs_untested = reason  # type: ignore[attr-defined]
    test.__doc__ = f"RS §{rule_id} — untested: {reason}"
    return test
