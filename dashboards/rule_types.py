"""The two kinds of Prometheus rule xmon ships: alerts and recording rules."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    parts: tuple[str, ...]  # sub-expressions of expr that must return data when scraped
    for_: str
    severity: str
    summary: str
    description: str
    keep_firing_for: str = ""  # hysteresis: keeps firing this long after expr stops matching


@dataclass(frozen=True)
class Record:
    """A recording rule: ``name`` (level:metric:operations, Prometheus's convention) is
    evaluated from ``expr`` and stored, so alerts, dashboards and ``xmon fleet`` share it."""

    name: str
    expr: str
    help: str  # a comment above the rule in the rules file
