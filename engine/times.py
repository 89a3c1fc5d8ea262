"""Application time at the edge: instants and durations in, integer nanoseconds out.

Inside the engine an instant is an ``int``: nanoseconds since the Unix epoch, UTC, and a
duration is an ``int`` of nanoseconds. Conversion happens once, where a value enters
(an ``Event`` constructor, a CLI flag, a log reader) — never on the per-event hot path.

Accepted instants: ``int`` (already nanoseconds), aware ``datetime`` (pendulum ``DateTime``
included) and ISO-8601 strings with an offset (``Z``, ``+01:00``, ``+0100``). A naive
datetime or a string without an offset is refused: a clock that does not say its zone is
exactly the skew this project exists to contain.

Accepted durations (``DurationLike``; one rule for the Python API, the command line, the wire
and Spark): a string with its unit — ISO-8601 (``"PT5M"``, ``"P1DT2H"``), the compact form
``"5m"``, ``"1h30m"``, ``"250ms"``, ``"1.5s"``, ``"300ns"``, or the spelled-out form of
Spark's intervals, ``"5 minutes"``, ``"1 hour 30 minutes"``, ``"interval 10 seconds"`` (every
unit word has one meaning: ``m``/``min``/``minute`` is a minute, ``ms``/``millisecond`` a
millisecond; months and years, whose length varies, are refused); a ``timedelta`` (pendulum
``Duration`` included); or a bare ``int``/``float``, which is **seconds**, as in Python's own
``time.sleep(5)`` and ``asyncio.wait_for(…, 5)`` (a float is rounded to the nanosecond). Code
that holds integer nanoseconds passes them as ``Nanoseconds(ns)``, an ``int`` that carries its
unit. A number in a string without a unit (``"300"``) is refused — seconds or nanoseconds? —
with a message naming the forms (``"0"`` is zero in every unit), and so is a negative
duration.

An ISO-8601 instant may carry any number of fractional digits; digits past the ninth are
dropped (the instant is truncated to its nanosecond, the same rule on every path).

>>> to_ns("1970-01-01T00:00:01Z")
1000000000
>>> to_duration_ns("1h30m") == 90 * 60 * 10**9
True
>>> to_duration_ns("5 minutes") == to_duration_ns("5m") == to_duration_ns(300) == 300 * 10**9
True
>>> to_duration_ns(0.25), to_duration_ns(Nanoseconds(250))
(250000000, 250)
>>> format_ns(1_500_000_000)
'1970-01-01T00:00:01.500000000Z'
>>> format_rfc3339(1_500_000_000)
'1970-01-01T00:00:01.500Z'
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import numbers
import re
from decimal import Decimal
from functools import lru_cache
from typing import Any, Collection, Iterable, TypeAlias

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
    "to_seconds",
    "Nanoseconds",
    "DurationLike",
    "DURATION_FORMS",
    "format_ns",
    "format_rfc3339",
    "fraction_digits",
    "format_duration_ns",
    "format_instant",
    "readable_repr",
    "TIME_UNITS",
    "PLAUSIBLE_YEARS",
    "UNSCALED_RANGES",
    "looks_unscaled",
]

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

#: The earliest instant the engine represents (a delayed CTI is floored here, TS §2.2).
MIN_TIME = -(2**63)
#: The latest instant; a CTI at ``MAX_TIME`` is the advance-to-infinity CTI.
MAX_TIME = 2**63 - 1

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


class Nanoseconds(int):
    """An ``int`` that is a duration already in nanoseconds: ``Nanoseconds(250)`` is 250 ns.

    A bare ``int`` given as a duration means seconds (``DurationLike``); code that holds
    integer nanoseconds — a policy's ``delay``, a window's size, a checkpoint's fields — hands
    them on in this type, so the unit travels with the value. Arithmetic gives plain ``int``s.

    >>> to_duration_ns(Nanoseconds(5 * NS_PER_S)) == to_duration_ns(5) == to_duration_ns("5s")
    True
    >>> Nanoseconds(300 * NS_PER_S)
    Nanoseconds(300000000000)
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Nanoseconds({int(self)})"


#: What a duration parameter accepts: a string with its unit (``"5m"``, ``"PT5M"``,
#: ``"5 minutes"``, ``"300ns"``), a ``timedelta``, a bare number of seconds (``5``, ``0.25``),
#: or ``Nanoseconds(ns)``.
DurationLike: TypeAlias = "str | _dt.timedelta | int | float"

#: The forms a duration may take, as error messages name them.
DURATION_FORMS = ("a string with its unit ('300s', '5m', '1h30m', '250ms', '300ns', 'PT5M', "
                  "'5 minutes'), a timedelta, a number of seconds, or "
                  "engine.times.Nanoseconds(ns)")
_UNIT_WORDS = {
    1: ("ns", "nanosecond", "nanoseconds"),
    NS_PER_US: ("us", "µs", "microsecond", "microseconds"),
    NS_PER_MS: ("ms", "millisecond", "milliseconds"),
    NS_PER_S: ("s", "sec", "secs", "second", "seconds"),
    60 * NS_PER_S: ("m", "min", "mins", "minute", "minutes"),
    3600 * NS_PER_S: ("h", "hour", "hours"),
    86400 * NS_PER_S: ("d", "day", "days"),
    7 * 86400 * NS_PER_S: ("w", "week", "weeks"),
}
_UNITS_NS = {word: scale for scale, words in _UNIT_WORDS.items() for word in words}
#: a number and the unit word after it (spaces allowed between and around them)
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([^\W\d_]+)\s*")
_NUMBER = re.compile(r"\+?\d+(?:\.\d*)?|\+?\.\d+")


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
    """Convert an instant to nanoseconds since the epoch (UTC). An ``int`` is nanoseconds
    already (TS §1.1); a float is refused (``time.time()`` gives seconds).

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
    if isinstance(value, float):  # time.time() most likely: seconds
        raise TimeFormatError(
            f"{what}: {value!r} is a float; an instant is int nanoseconds since the epoch "
            "(time.time_ns(), not time.time()), an aware datetime (for seconds: "
            "datetime.fromtimestamp(t, timezone.utc)) or an ISO-8601 string with an offset")
    raise TimeFormatError(
        f"{what}: {value!r} of type {type(value).__name__} is not an instant; expected int "
        "nanoseconds since the epoch, an aware datetime or an ISO-8601 string with an offset"
    )


_FRACTION = re.compile(r"[T ]\d{2}:\d{2}:\d{2}[.,](\d+)")


def _parse_instant(text: str, what: str) -> int:
    stripped = text.strip()
    if stripped[10:11] == "t":  # RFC 3339 allows 't' and 'z' in lower case
        stripped = stripped[:10] + "T" + stripped[11:]
    if stripped[-1:] == "z":
        stripped = stripped[:-1] + "Z"
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
    try:
        parsed.utcoffset()
    except ValueError as err:  # pendulum reads '+24:00', which datetime cannot hold
        raise TimeFormatError(
            f"{what}: {text!r} has an offset of a day or more; expected an offset between "
            "-23:59 and +23:59"
        ) from err
    ns = _datetime_to_ns(parsed, what)
    match = _FRACTION.search(stripped)
    if match and len(match.group(1)) > 6:  # datetime keeps microseconds; keep the rest too
        digits = (match.group(1) + "000000000")[:9]  # past the ninth: truncated (TS §1.4)
        ns += int(digits[6:])
    return ns


_OFFSET = re.compile(r"(Z|z|[+-]\d{2}(:?\d{2})?)$")


def _has_offset(text: str) -> bool:
    # The offset ends the time of day, which follows the date after a 'T' or a space
    # ('2026-11-22 08:00:00+01:00' is as explicit as its 'T' form).
    sep = max(text.upper().find("T"), text.find(" "))
    return sep >= 0 and bool(_OFFSET.search(text[sep + 1:]))


def to_duration_ns(value: DurationLike, *, what: str = "duration") -> int:
    """Convert a duration (``DurationLike``) to integer nanoseconds.

    A bare ``int`` or ``float`` is seconds (a float rounded to the nanosecond);
    ``Nanoseconds`` passes through. Refused with a ``TimeFormatError`` naming ``what`` and the
    accepted forms: a negative duration ("must not be negative"), a number in a string without
    its unit (``"300"``), NaN and infinities, and a bare number of seconds longer than the
    ~292 years an ``int64`` of nanoseconds holds (nanoseconds passed as a bare number).
    """
    if isinstance(value, Nanoseconds):  # TS §1.5: already nanoseconds
        ns = int(value)
    elif isinstance(value, bool):
        raise TimeFormatError(f"{what}: {value!r} is a bool; expected a duration: "
                              f"{DURATION_FORMS}")
    elif isinstance(value, numbers.Integral):  # TS §1.5: seconds, as time.sleep takes them
        ns = int(value) * NS_PER_S
    elif isinstance(value, numbers.Real):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise TimeFormatError(f"{what}: {value!r} is not a duration; expected a finite "
                                  "number of seconds or a string with its unit such as '5m'")
        # to the nearest nanosecond, of the number as written (its shortest decimal form)
        ns = int((Decimal(repr(seconds)) * NS_PER_S).to_integral_value())
    elif isinstance(value, _dt.timedelta):
        ns = (value.days * 86400 + value.seconds) * NS_PER_S + value.microseconds * NS_PER_US
    elif isinstance(value, str):
        ns = _parse_duration(value, what)
    else:
        raise TimeFormatError(f"{what}: {value!r} of type {type(value).__name__} is not a "
                              f"duration; expected {DURATION_FORMS}")
    if ns < 0:
        raise TimeFormatError(f"{what}: {value!r} must not be negative; expected a duration "
                              ">= 0 such as '5m'")
    if ns > MAX_TIME and isinstance(value, numbers.Real) and not isinstance(value, Nanoseconds):
        raise TimeFormatError(f"{what}: {value!r} seconds is longer than an int64 of "
                              "nanoseconds holds (about 292 years); a bare number is seconds: "
                              "pass integer nanoseconds as engine.times.Nanoseconds(ns)")
    return ns


def to_seconds(value: DurationLike, *, what: str = "duration") -> float:
    """A duration (``DurationLike``, as ``to_duration_ns`` reads it) in seconds, for the
    timeouts that ``asyncio`` and ``threading`` take.

    >>> to_seconds("1m30s"), to_seconds(2), to_seconds(Nanoseconds(5 * NS_PER_MS))
    (90.0, 2.0, 0.005)
    """
    return to_duration_ns(value, what=what) / NS_PER_S


def _parse_duration(text: str, what: str) -> int:
    stripped = text.strip()
    if not stripped:
        raise TimeFormatError(f"{what}: empty string is not a duration; expected e.g. '5m'")
    if stripped[0] == "-":
        raise TimeFormatError(f"{what}: {text!r} must not be negative; expected a duration "
                              ">= 0 such as '5m'")
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
    if _NUMBER.fullmatch(stripped):  # seconds or nanoseconds? the text cannot say ...
        if not stripped.strip("+0."):
            return 0  # ... except for zero, which is zero in every unit
        raise TimeFormatError(_no_unit(text, stripped, what))  # TS §1.5
    words = stripped.lower()
    if words.startswith("interval") and words[8:9].isspace():  # Spark: 'interval 5 minutes'
        words = words[8:]
    position = 0
    total = 0
    for match in _PART.finditer(words):
        if match.start() != position:
            break
        number, unit = match.groups()
        scale = _UNITS_NS.get(unit)
        if scale is None:
            if unit.rstrip("s") in ("month", "year", "mo", "y", "yr"):
                raise TimeFormatError(
                    f"{what}: {text!r} uses years or months, whose length varies; "
                    "expected days or smaller units")
            break
        if "." in number:
            whole, frac = number.split(".")
            total += int(whole) * scale + (int(frac) * scale) // 10 ** len(frac)
        else:
            total += int(number) * scale
        position = match.end()
    if position == 0 or position != len(words):
        raise TimeFormatError(
            f"{what}: cannot parse {text!r} as a duration; expected ISO-8601 ('PT5M'), a "
            "compact form such as '5m', '1h30m', '250ms' (units ns, us, ms, s, m, h, d, w), "
            "or words such as '5 minutes'"
        )
    return total


def _no_unit(text: str, number: str, what: str) -> str:
    """The message for a number without its unit: the forms it may have meant."""
    number = number.lstrip("+")
    meant = [f"'{number}s'", "'5m'", "'PT5M'"]
    if number.isdigit():
        meant.append(f"'{number}ns'")
    return (f"{what}: {text!r} has no unit; expected a duration with its unit, e.g. "
            f"{', '.join(meant[:-1])} or {meant[-1]}")


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


def format_instant(ns: int) -> str:
    """An instant as messages and reprs show it: RFC 3339 UTC with a fraction only as needed
    (``format_rfc3339``; exact, ``to_ns`` reads it back), ``MIN_TIME`` and ``MAX_TIME`` as
    ``"-inf"`` and ``"+inf"``.

    >>> format_instant(1_795_334_400 * NS_PER_S + 250 * NS_PER_MS), format_instant(MAX_TIME)
    ('2026-11-22T08:00:00.250Z', '+inf')
    """
    if ns >= MAX_TIME:
        return "+inf"
    if ns <= MIN_TIME:
        return "-inf"
    return format_rfc3339(ns)


def format_rfc3339(ns: int, digits: int | None = None) -> str:
    """Render an instant as RFC 3339 UTC: ``2026-11-22T08:00:00Z``, with a fraction only as
    needed, in groups of three digits (``.500``, ``.000250``, ``.000000001``).

    ``digits`` (0, 3, 6 or 9) fixes the fraction instead (truncating), for columns of times
    printed alike. Every ``int64`` renders, ``MIN_TIME`` and ``MAX_TIME`` included (years
    1677 to 2262), and ``to_ns`` reads the text back to the same ``ns``.
    """
    seconds, frac = divmod(ns, NS_PER_S)
    head = _second_text(seconds)
    if digits is None:
        if not frac:
            return head + "Z"
        if not frac % NS_PER_MS:
            return f"{head}.{frac // NS_PER_MS:03d}Z"
        if not frac % NS_PER_US:
            return f"{head}.{frac // NS_PER_US:06d}Z"
        return f"{head}.{frac:09d}Z"
    if digits:
        return f"{head}.{frac:09d}"[:20 + digits] + "Z"
    return head + "Z"


@lru_cache(maxsize=4096)
def _second_text(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of a second since the epoch (cached: a log's times cluster)."""
    return (_EPOCH + _dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")


def fraction_digits(values: Iterable[int]) -> int:
    """The fraction digits (0, 3, 6 or 9) that render every one of ``values`` exactly: the
    one precision for a column of times (``format_rfc3339(t, digits)``)."""
    digits = 0
    for t in values:
        frac = t % NS_PER_S
        if frac % NS_PER_US:
            return 9
        digits = max(digits, 0 if frac == 0 else 3 if frac % NS_PER_MS == 0 else 6)
    return digits


#: The units a log's integer times may be given in (``--time-unit``), as nanoseconds each.
TIME_UNITS = {"s": NS_PER_S, "ms": NS_PER_MS, "us": NS_PER_US, "ns": 1}

#: The years in which an integer, read in one of the coarser units, makes it implausible as
#: nanoseconds in a log: such an integer is refused unless the unit is given.
PLAUSIBLE_YEARS = (2000, 2100)
_YEAR_LO = (_dt.datetime(PLAUSIBLE_YEARS[0], 1, 1, tzinfo=_dt.timezone.utc) - _EPOCH).days * 86400
_YEAR_HI = (_dt.datetime(PLAUSIBLE_YEARS[1], 1, 1, tzinfo=_dt.timezone.utc) - _EPOCH).days * 86400
#: ``(unit, lowest, highest + 1)``: the integers that are an instant of ``PLAUSIBLE_YEARS``
#: when read in that unit
UNSCALED_RANGES = tuple((unit, _YEAR_LO * NS_PER_S // scale, _YEAR_HI * NS_PER_S // scale)
                        for unit, scale in TIME_UNITS.items() if scale > 1)


def looks_unscaled(value: int) -> str | None:
    """The unit (``"s"``, ``"ms"``, ``"us"``) in which the integer ``value`` is an instant
    between the years ``PLAUSIBLE_YEARS`` (2000 to 2100) — unless, as nanoseconds, it is a
    whole number of seconds — or ``None``.

    Such an integer taken as nanoseconds would be an instant in the first seven weeks of
    1970 (within 4.1 s, 68 min or 47.5 days after the epoch): no clock of a log of today
    says that, while the epoch seconds, milliseconds and microseconds of today's logs say
    exactly this. The ranges do not overlap: ``1795334400`` is seconds (2026-11-22),
    ``1795334400000`` milliseconds. Relative clocks that start at 0 (tests, simulations)
    stay plausible: below 0.95 s, 15.7 min and 10.9 days, and at whole seconds
    (``2_000_000_000``, two seconds, is read as nanoseconds; an epoch-seconds log is refused
    at its first time that is not one of the four instants 10**9, …, 4 * 10**9).
    """
    if value % NS_PER_S:
        for unit, lo, hi in UNSCALED_RANGES:
            if lo <= value < hi:
                return unit
    return None


def format_duration_ns(ns: int) -> str:
    """Render a duration compactly: ``format_duration_ns(90 * 60 * 10**9) == '1h30m'``; a
    negative one (a lag ahead) with its sign, ``'-1s'``."""
    if ns == 0:
        return "0s"
    if ns < 0:
        return "-" + format_duration_ns(-ns)
    parts = []
    rest = ns
    for unit, scale in (("d", 86400 * NS_PER_S), ("h", 3600 * NS_PER_S), ("m", 60 * NS_PER_S),
                        ("s", NS_PER_S), ("ms", NS_PER_MS), ("us", NS_PER_US), ("ns", 1)):
        count, rest = divmod(rest, scale)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def readable_repr(obj: Any, instants: Collection[str] = (), durations: Collection[str] = (),
                  ) -> str:
    """A dataclass's repr with its time fields readable: ``instants`` as RFC 3339 text
    (``format_instant``), ``durations`` compactly (``format_duration_ns``); the other fields,
    and ``None``, as ``repr`` shows them. Both renderings are exact.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Seen:
    ...     name: str
    ...     last: int | None
    ...     lag: int
    ...     def __repr__(self) -> str:
    ...         return readable_repr(self, instants=("last",), durations=("lag",))
    >>> Seen("A", 1_795_334_400 * NS_PER_S, -NS_PER_S)
    Seen(name='A', last='2026-11-22T08:00:00Z', lag='-1s')
    """
    parts = []
    for f in dataclasses.fields(obj):
        if not f.repr:
            continue
        value = getattr(obj, f.name)
        if isinstance(value, int) and not isinstance(value, bool):
            if f.name in instants:
                value = format_instant(value)
            elif f.name in durations:
                value = format_duration_ns(value)
        parts.append(f"{f.name}={value!r}")
    return f"{type(obj).__name__}({', '.join(parts)})"
