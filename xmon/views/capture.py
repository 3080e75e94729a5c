"""What a capture is doing while a view waits for it: one line, the same in ``xmon capture``
and in ``xmon top``."""

from __future__ import annotations


def progress_line(elapsed: float, duration: float) -> str:
    """What a capture is doing ``elapsed`` seconds after the request, and why it waits."""
    if duration <= 0:
        return f"saving the device memory profile … {elapsed:.0f} s"
    if elapsed < duration:
        return f"tracing … {elapsed:.0f} s of {duration:g} s"
    return (
        f"writing the trace … {elapsed:.0f} s (the job exports what it recorded; "
        "slower while its host is busy)"
    )
