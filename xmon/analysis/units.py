"""How every view writes sizes and rates, so the same value reads the same everywhere.

Memory sizes take IEC binary prefixes (``KiB``, ``MiB``, ``GiB``), as nvitop, neuron-top and
tpu-info print them; counts and per-second rates (FLOPs, bytes/s) take SI decimal prefixes.
Three significant digits, never an exponent. ``None`` (not available here) is the caller's
business: these functions take numbers only.
"""

from __future__ import annotations

IEC_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
LOWER_BOUND_MARK = "≥"  # FLOPs of a loop with an unknown trip count: at least this
UPPER_BOUND_MARK = "≤"  # FLOPs counting a conditional's costliest branch: at most this
EITHER_BOUND_MARK = "≶"  # both at once: neither bound holds
SI_PREFIXES = ("", "k", "M", "G", "T", "P", "E")


def _three_digits(value: float) -> str:
    # .3g would print 1000-1023 KiB as "1e+03"; from 100 on, whole numbers are three digits.
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def iec_bytes(value: float) -> str:
    """``0B``, ``1000B``, ``1.5KiB``, ``512MiB``, ``2.13GiB``."""
    size = float(value)
    for unit in IEC_UNITS:
        if abs(size) < 1024 or unit == IEC_UNITS[-1]:
            return f"{size:.0f}{unit}" if unit == "B" else f"{_three_digits(size)}{unit}"
        size /= 1024
    raise AssertionError("unreachable")


def si(value: float, unit: str = "") -> str:
    """``950``, ``1.2k``, ``350G``, ``1.2TB`` (with ``unit="B"``, for bytes per second)."""
    scaled = float(value)
    for prefix in SI_PREFIXES:
        if abs(scaled) < 999.5 or prefix == SI_PREFIXES[-1]:
            return f"{scaled:.3g}{prefix}{unit}"
        scaled /= 1000
    raise AssertionError("unreachable")


def duration(value: float) -> str:
    """Step and compile times: ``850µs``, ``12.3ms``, ``1.25s``, ``3m05s``, ``2h05m``, ``3d``."""
    if value < 1e-3:
        return f"{value * 1e6:.0f}µs"
    if value < 1.0:
        return f"{value * 1e3:.1f}ms"
    if value < 60:
        return f"{value:.2f}s"
    if value < 3600:
        minutes, rest = divmod(int(value), 60)
        return f"{minutes}m{rest:02d}s"
    if value < 86400:
        hours, rest = divmod(int(value), 3600)
        return f"{hours}h{rest // 60:02d}m"
    return f"{value / 86400:.0f}d"


def bound_mark(lower: bool, upper: bool) -> str:
    """The mark of FLOPs that are a lower bound, an upper bound, both (neither holds) or exact
    ("")."""
    if lower and upper:
        return EITHER_BOUND_MARK
    return LOWER_BOUND_MARK if lower else UPPER_BOUND_MARK if upper else ""
