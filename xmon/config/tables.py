"""The tables ``[collectors]``, ``[host]``, ``[peaks]`` and ``[profiling]``, and the JSON the
environment gives for some of them, checked key by key so an error names the bad entry
(``peaks.cpu.flops``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from xmon.config.errors import Problem, did_you_mean, show
from xmon.config.profiling import check_profiling
from xmon.config.values import int_in, non_empty_text, to_number

PEAK_KEYS = ("flops_per_second", "memory_bytes", "memory_bytes_per_second")
HOST_TEXT_KEYS = ("slice", "accelerator_type")
HOST_INT_KEYS = ("worker", "slice_index", "num_slices", "num_workers")


def collectors(value: Any, from_text: bool) -> dict[str, bool]:
    if not isinstance(value, Mapping):
        raise Problem(f"must be a table of NAME = true/false, got {show(value)}")
    for name, enabled in value.items():
        if not isinstance(enabled, bool):
            raise Problem(f"must be true or false, got {show(enabled)}", name)
    return dict(value)


def host(value: Any, from_text: bool) -> dict[str, Any]:
    """The [host] table: slice identity overrides and whether to read GCE metadata."""
    if not isinstance(value, Mapping):
        raise Problem(f"must be a table, got {show(value)}")
    valid = ", ".join((*HOST_TEXT_KEYS, *HOST_INT_KEYS, "metadata"))
    clean: dict[str, Any] = {}
    for key, raw in value.items():
        try:
            if key in HOST_TEXT_KEYS:
                clean[key] = non_empty_text(raw, from_text)
            elif key in HOST_INT_KEYS:
                clean[key] = int_in(0, 2**31 - 1)(raw, from_text)
            elif key == "metadata":
                if raw != "auto" and not isinstance(raw, bool):
                    raise Problem(f'must be true, false or "auto", got {show(raw)}')
                clean[key] = raw
            else:
                known = (*HOST_TEXT_KEYS, *HOST_INT_KEYS, "metadata")
                raise Problem(f"is unknown{did_you_mean(key, known)}; valid keys: {valid}")
        except Problem as problem:
            raise Problem(str(problem), key) from None
    return clean


def worker_text(value: Any, from_text: bool) -> int:
    text = non_empty_text(value, from_text)
    if not text.isdigit():
        raise Problem(f"must be a non-negative integer, got {show(value)}")
    return int(text)


def peaks(value: Any, from_text: bool) -> dict[str, dict[str, float]]:
    if not isinstance(value, Mapping):
        raise Problem(f"must be a table of device kinds, got {show(value)}")
    return {kind: _peak_entry(kind, entry) for kind, entry in value.items()}


def _peak_entry(kind: str, entry: Any) -> dict[str, float]:
    if not isinstance(entry, Mapping):
        raise Problem(f"must be a table with keys {', '.join(PEAK_KEYS)}", kind)
    clean: dict[str, float] = {}
    for key, raw in entry.items():
        if key not in PEAK_KEYS:
            raise Problem(
                f"is unknown{did_you_mean(key, PEAK_KEYS)}; valid keys: {', '.join(PEAK_KEYS)}",
                f"{kind}.{key}",
            )
        number = to_number(raw, False)
        if number is None or number <= 0:
            raise Problem(f"must be a positive number, got {show(raw)}", f"{kind}.{key}")
        clean[key] = number
    return clean


def peaks_json(value: Any, from_text: bool) -> dict[str, dict[str, float]]:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise Problem(
            f'invalid JSON ({exc}); example: {{"cpu": {{"memory_bytes": 1.6e10}}}}'
        ) from None
    return peaks(data, False)


def profiling(value: Any, from_text: bool) -> dict[str, Any]:
    try:
        return check_profiling(value)
    except ValueError as exc:
        raise Problem(str(exc)) from None


def profiling_json(value: Any, from_text: bool) -> dict[str, Any]:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise Problem(f'invalid JSON ({exc}); example: {{"triggers": false}}') from None
    return profiling(data, False)
