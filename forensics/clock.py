"""Times in log lines, on one clock.

Artifacts date their lines every way there is: ISO and Python logging
(`2025-04-21 04:13:43,123`, `[2025-04-21T04:13:43.123Z]`), torchelastic's
summary (`2025-04-21_04:13:43`), c10 and glog prefixes with no year
(`[E1129 02:41:17.665203`, `E709 …` is July 9), syslog (`Apr 21 04:13:43`),
`dmesg -T` (`[Tue Apr 21 04:13:43 2025]`) and plain dmesg, which counts
seconds since its host booted (`[12345.678901]`).

`stamp(text)` reads the first of these in a line as (seconds, clock): wall
times are seconds since the epoch as if UTC (hosts log local time; only
differences matter), on clock "wall", or "wall-noyear" when the line names
no year (the year is filled in from other lines later); boot-relative times
are on clock "boot". Ordering across hosts is the timeline's business.
"""

from __future__ import annotations

import calendar
import re

_MONTHS = {name: i for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}

_ISO = re.compile(r"(?<!\d)(\d{4})-(\d\d)-(\d\d)[T _](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
_C10 = re.compile(r"(?:^|[\[\s:])[FEWIV](\d{3,4}) (\d\d):(\d\d):(\d\d)\.(\d{1,9})")
_DMESG_T = re.compile(r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\w{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]")
_SYSLOG = re.compile(r"(?:^|\s)(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d)\b")
_BOOT = re.compile(r"^\s*(?:<\d>)?\[\s*(\d{1,9})\.(\d{6})\]")
NOYEAR = 2000  # the year of a time that names none, until another line names one (a leap year: Feb 29 fits)


def stamp(text: str) -> tuple[float, str] | None:
    """(seconds, "wall" | "wall-noyear" | "boot") of the first time in
    `text`, or None."""
    found = _ISO.search(text)
    if found:
        year, month, day, hour, minute, second, fraction = found.groups()
        return _epoch(int(year), int(month), int(day), int(hour), int(minute), int(second), fraction), "wall"
    found = _C10.search(text)
    if found:
        digits, hour, minute, second, fraction = found.groups()
        month, day = int(digits[:-2]), int(digits[-2:])
        if 1 <= month <= 12 and 1 <= day <= 31:
            return _epoch(NOYEAR, month, day, int(hour), int(minute), int(second), fraction), "wall-noyear"
    found = _DMESG_T.search(text)
    if found and found.group(1).lower() in _MONTHS:
        month, day, hour, minute, second, year = found.groups()
        return _epoch(int(year), _MONTHS[month.lower()], int(day), int(hour), int(minute), int(second), None), "wall"
    found = _BOOT.search(text)
    if found:
        return int(found.group(1)) + int(found.group(2)) / 1e6, "boot"
    found = _SYSLOG.search(text)
    if found:
        month, day, hour, minute, second = found.groups()
        return _epoch(NOYEAR, _MONTHS[month.lower()], int(day), int(hour), int(minute), int(second), None), "wall-noyear"
    return None


def _epoch(year, month, day, hour, minute, second, fraction) -> float:
    try:
        base = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return 0.0
    return base + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)


def with_year(seconds: float, year: int) -> float:
    """A "wall-noyear" time moved into `year` (its month, day and time kept)."""
    import time

    parts = time.gmtime(seconds)
    day = min(parts.tm_mday, calendar.monthrange(year, parts.tm_mon)[1])
    whole = calendar.timegm((year, parts.tm_mon, day, parts.tm_hour, parts.tm_min, parts.tm_sec, 0, 0, 0))
    return whole + (seconds - int(seconds))


def year_of(seconds: float) -> int:
    import time

    return time.gmtime(seconds).tm_year
