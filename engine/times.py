"""Application time at the edge: instants and durations in, integer nanoseconds out.

Inside the engine an instant is an ``int``: nanoseconds since the Unix epoch, UTC, and a
duration is an ``int`` of nanoseconds. Conversion happens once, where a value enters
(an ``Event`` constructor, a CLI flag, a log reader) — never on the per-event hot path.

Accepted instants: ``int`` (already nanoseconds), aware ``datetime`` (pendulum ``DateTime``
included) and ISO-8601 strings with an offset or ``Z``. A naive datetime or a string without
an offset is refused: a clock that does not say its zone is exactly the skew this project
exists to contain.

Accepted durations: ``int`` nanoseconds, ``timedelta`` (pendulum ``Duration`` included),
ISO-8601 (``"PT5M"``, ``"P1DT2H"``) and the compact form ``"5m"``, ``"1h30m"``, ``"250ms"``,
``"1.5s"``.

>>> to_ns("1970-01-01T00:00:01Z")
1000000000
>>> to_duration_ns("1h30m") == 90 * 60 * 10**9
True
>>> format_ns(1_500_000_000)
'1970-01-01T00:00:01.500000000Z'
"""

from __future__ import annotations

import datetime as _dt
import re

import pendulum

from engine.errors import TimeFormatError

__all__ = [
    "MIN_TIME",
    "MAX_TIME",
    "NS_PER_US",
    "NS_PER_MS",
    "NS_PER_S",
    "to_ns",
    "to_duration_ns",
    "format_ns",
    "format_duration_ns",
]

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

#: The earliest instant the engine represents (a delayed CTI is floored here, TS §2.2).
MIN_TIME = -(2**63)
#: The latest instant; a CTI at ``MAX_TIME`` is the advance-to-infinity CTI.
MAX_TIME = 2**63 - 1

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_UNITS_NS = {
    "ns": 1,
    "us": NS_PER_US,
    "µs": NS_PER_US,
    "ms": NS_PER_MS,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "min": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
    "d": 86400 * NS_PER_S,
}
_COMPACT = re.compile(r"(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|min|s|m|h|d)")


def _datetime_to_ns(value: _dt.datetime, what: str) -> int:
    if value.tzinfo is None or value.utcoffset() is None:
        raise TimeFormatError(
            f"{what}: naive datetime {value.isoformat()!r} has no time zone; "
            "expected an aware datetime (e.g. with tzinfo=timezone.utc)"
        )
    # datetime's own subtraction: a pendulum DateTime's returns an Interval whose components
    # are off by microseconds before the epoch.
    delta = _dt.datetime.__sub__(value, _EPOCH)
    return (delta.days * 86400 + delta.seconds) * NS_PER_S + delta.microseconds * NS_PER_US


def to_ns(value: object, *, what: str = "time") -> int:
    """Convert an instant to nanoseconds since the epoch (UTC).

    ``what`` names the value in the error message (``"start of event 12"``, ``"--until"``).
    Sub-microsecond digits of an ISO string are kept (``"...T00:00:00.000000001Z"``).
    """
    if type(value) is int:
        return value
    if isinstance(value, bool):
        raise TimeFormatError(f"{what}: {value!r} is a bool; expected an instant")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, _dt.datetime):
        return _datetime_to_ns(value, what)
    if isinstance(value, str):
        return _parse_instant(value, what)
    raise TimeFormatError(
        f"{what}: {value!r} of type {type(value).__name__} is not an instant; expected int "
        "nanoseconds since the epoch, an aware datetime or an ISO-8601 string with an offset"
    )


_FRACTION = re.compile(r"[T ]\d{2}:\d{2}:\d{2}[.,](\d+)")


def _parse_instant(text: str, what: str) -> int:
    stripped = text.strip()
    try:
        parsed = pendulum.parse(stripped, strict=True, exact=True)
    except Exception as err:  # pendulum raises several types; all mean "not an instant"
        raise TimeFormatError(
            f"{what}: cannot parse {text!r} as an ISO-8601 instant "
            "(expected e.g. '2026-11-22T08:00:00Z')"
        ) from err
    if not isinstance(parsed, _dt.datetime):
        raise TimeFormatError(
            f"{what}: {text!r} is a {type(parsed).__name__.lower()}, not an instant; "
            "expected a date and time with an offset, e.g. '2026-11-22T08:00:00Z'"
        )
    if not _has_offset(stripped):
        raise TimeFormatError(
            f"{what}: {text!r} has no UTC offset; expected 'Z' or an offset such as '+01:00'"
        )
    ns = _datetime_to_ns(parsed, what)
    match = _FRACTION.search(stripped)
    if match and len(match.group(1)) > 6:  # datetime keeps microseconds; keep the rest too
        digits = (match.group(1) + "000000000")[:9]
        ns += int(digits[6:])
    return ns


_OFFSET = re.compile(r"(Z|z|[+-]\d{2}(:?\d{2})?)$")


def _has_offset(text: str) -> bool:
    # The offset ends the time of day, which follows the date after a 'T' or a space
    # ('2026-11-22 08:00:00+01:00' is as explicit as its 'T' form).
    sep = max(text.upper().find("T"), text.find(" "))
    return sep >= 0 and bool(_OFFSET.search(text[sep + 1:]))


def to_duration_ns(value: object, *, what: str = "duration") -> int:
    """Convert a duration to integer nanoseconds; negative durations are refused."""
    if isinstance(value, bool):
        raise TimeFormatError(f"{what}: {value!r} is a bool; expected a duration")
    if isinstance(value, int):
        ns = int(value)
    elif isinstance(value, _dt.timedelta):
        ns = (value.days * 86400 + value.seconds) * NS_PER_S + value.microseconds * NS_PER_US
    elif isinstance(value, str):
        ns = _parse_duration(value, what)
    else:
        raise TimeFormatError(
            f"{what}: {value!r} of type {type(value).__name__} is not a duration; expected int "
            "nanoseconds, a timedelta, ISO-8601 ('PT5M') or a compact form ('5m', '1h30m')"
        )
    if ns < 0:
        raise TimeFormatError(f"{what}: {value!r} is negative; expected a duration >= 0")
    return ns


def _parse_duration(text: str, what: str) -> int:
    stripped = text.strip()
    if not stripped:
        raise TimeFormatError(f"{what}: empty string is not a duration; expected e.g. '5m'")
    if stripped[0] in "Pp":
        try:
            parsed = pendulum.parse(stripped.upper(), strict=True)
        except Exception as err:
            raise TimeFormatError(
                f"{what}: cannot parse {text!r} as an ISO-8601 duration (expected e.g. 'PT5M')"
            ) from err
        if not isinstance(parsed, _dt.timedelta):
            raise TimeFormatError(f"{what}: {text!r} is not a duration (expected e.g. 'PT5M')")
        if getattr(parsed, "years", 0) or getattr(parsed, "months", 0):
            raise TimeFormatError(
                f"{what}: {text!r} uses years or months, whose length varies; "
                "expected days or smaller units"
            )
        return to_duration_ns(parsed, what=what)
    position = 0
    total = 0
    for match in _COMPACT.finditer(stripped.lower()):
        if match.start() != position and stripped[position:match.start()].strip():
            break
        number, unit = match.groups()
        scale = _UNITS_NS[unit]
        if "." in number:
            whole, frac = number.split(".")
            total += int(whole) * scale + (int(frac) * scale) // 10 ** len(frac)
        else:
            total += int(number) * scale
        position = match.end()
    if position == 0 or stripped[position:].strip():
        raise TimeFormatError(
            f"{what}: cannot parse {text!r} as a duration; expected ISO-8601 ('PT5M') or a "
            "compact form such as '5m', '1h30m', '250ms' (units ns, us, ms, s, m, h, d)"
        )
    return total


def format_ns(ns: int) -> str:
    """Render an instant as ISO-8601 UTC with nanosecond precision (``...T00:00:01.500000000Z``).

    ``MIN_TIME`` and ``MAX_TIME`` render as ``"-inf"`` and ``"+inf"``.
    """
    if ns >= MAX_TIME:
        return "+inf"
    if ns <= MIN_TIME:
        return "-inf"
    seconds, frac = divmod(ns, NS_PER_S)
    try:
        stamp = _EPOCH + _dt.timedelta(seconds=seconds)
    except OverflowError:
        return str(ns)
    return f"{stamp.strftime('%Y-%m-%dT%H:%M:%S')}.{frac:09d}Z"


def format_duration_ns(ns: int) -> str:
    """Render a duration compactly: ``format_duration_ns(90 * 60 * 10**9) == '1h30m'``."""
    if ns == 0:
        return "0s"
    parts = []
    rest = ns
    for unit, scale in (("d", 86400 * NS_PER_S), ("h", 3600 * NS_PER_S), ("m", 60 * NS_PER_S),
                        ("s", NS_PER_S), ("ms", NS_PER_MS), ("us", NS_PER_US), ("ns", 1)):
        count, rest = divmod(rest, scale)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
