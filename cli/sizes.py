"""Byte counts as the reference's command-line tools print them."""

from __future__ import annotations

UNITS = ("KiB", "MiB", "GiB")


def human_bytes(n: int) -> str:
    """Exact under 1 KiB (`1023 B`); above, one decimal in KiB, MiB or GiB, where a value that would print as
    1024.0 of a unit prints as 1.0 of the next."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    unit = 0
    while unit < len(UNITS) - 1 and (value >= 1024 or f"{value:.1f}" == "1024.0"):
        value /= 1024
        unit += 1
    return f"{value:.1f} {UNITS[unit]}"
