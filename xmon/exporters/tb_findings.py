"""A job's findings as TensorBoard text summaries (the Text dashboard), in the job's run.

A finding is written when it appears, when its severity changes and when it stops holding,
never on every export: one tag per finding, ``findings/<kind>`` or
``findings/<kind>/<subject>`` (a recompiled function), rendered as markdown with its severity,
since when, the evidence, the fix and the start of its long evidence (a stall's stacks); each
text is at most ``TEXT_MAX_BYTES``. When the job's event file is rotated, the findings that
hold are written again into the new file, so a run never loses them with its old file.

Only the event protos are imported (no numpy), as in :mod:`xmon.exporters.tb_events`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from tensorboard.compat.proto import (
    event_pb2,
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)

from xmon.model import Finding

PLUGIN_NAME = "text"  # tensorboard.plugins.text.metadata.PLUGIN_NAME
TAG_PREFIX = "findings"
TEXT_MAX_BYTES = 8192
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")

Key = tuple[str, str | None]  # (kind, subject)
JobKey = tuple[str, int]


def tag_of(kind: str, subject: str | None) -> str:
    parts = [TAG_PREFIX, kind] + ([subject] if subject else [])
    return "/".join(_TAG_UNSAFE.sub("_", part)[:100] for part in parts)


def markdown(finding: Finding) -> str:
    """The finding as the Text dashboard renders it, cut to ``TEXT_MAX_BYTES``."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(finding.since))
    title = f"**{_escape(finding.severity.upper())}** {_escape(finding.kind)}"
    lines = [f"{title}: {_escape(finding.summary)}", ""]
    lines += [f"since {since}", ""]
    if finding.evidence:
        lines += ["| evidence | value |", "|---|---|"]
        lines += [f"| {_escape(name)} | {_escape(value)} |" for name, value in finding.evidence]
        lines.append("")
    if finding.fix:
        lines += [f"**fix:** {_escape(finding.fix)}", ""]
    head = "\n".join(lines)
    if not finding.detail:
        return _cut(head)
    room = TEXT_MAX_BYTES - len(head.encode()) - 64
    detail = _cut(finding.detail.replace("```", "'''"), max(room, 0))
    return _cut(f"{head}```\n{detail}\n```")


def resolved(kind: str, subject: str | None) -> str:
    about = f" ({_escape(subject)})" if subject else ""
    return f"**resolved** {_escape(kind)}{about}: no longer holds"


# Markdown's own characters in a job's text are shown as themselves: ``![x](https://…)`` was
# an image the Text dashboard fetched whenever someone opened the board (a beacon), and raw
# HTML (``<img src=…>``) passes TensorBoard's sanitizer too. So no text from a job makes an
# image, a link or markup; only the fenced block of long evidence is literal by itself.
# (An underscore inside a word is no emphasis to Python-Markdown: names keep theirs.)
_MARKDOWN = {ch: "\\" + ch for ch in "\\`*[]!|"} | {
    "<": "&lt;", ">": "&gt;", "&": "&amp;", "\n": " ",
}  # fmt: skip
_MARKDOWN_TABLE = str.maketrans(_MARKDOWN)


def _escape(text: str) -> str:
    return text.translate(_MARKDOWN_TABLE)


def _cut(text: str, limit: int = TEXT_MAX_BYTES) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: max(limit - 16, 0)].decode(errors="ignore") + "\n… (cut)"


def text_event(wall_time: float, step: int, texts: list[tuple[str, str]]) -> event_pb2.Event:
    """One event with a text summary per (tag, markdown)."""
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME)
    )
    values = [
        summary_pb2.Summary.Value(
            tag=tag,
            metadata=metadata,
            tensor=tensor_pb2.TensorProto(
                dtype=types_pb2.DT_STRING,
                tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                string_val=[text.encode()],
            ),
        )
        for tag, text in texts
    ]
    return event_pb2.Event(
        wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=values)
    )


class FindingsText:
    """What each job's run was last told about each of its findings."""

    def __init__(self) -> None:
        self._told: dict[JobKey, tuple[Path, dict[Key, str]]] = {}  # file, key -> severity

    def changes(
        self, job: JobKey, findings: tuple[Finding, ...], file: Path
    ) -> list[tuple[str, str]]:
        """(tag, markdown) to write now: new findings, changed severities, resolved ones."""
        told_file, told = self._told.get(job, (file, {}))
        if told_file != file:
            told = {}  # a new event file: tell it every finding that holds
        now = {(f.kind, f.subject): f.severity for f in findings}
        out = [
            (tag_of(f.kind, f.subject), markdown(f))
            for f in findings
            if told.get((f.kind, f.subject)) != f.severity
        ]
        out += [(tag_of(*key), resolved(*key)) for key in told if key not in now]
        self._told[job] = (file, now)
        return out

    def keep(self, live: set[JobKey]) -> None:
        self._told = {k: v for k, v in self._told.items() if k in live}
