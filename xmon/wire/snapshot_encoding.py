"""Snapshots as the JSON views read, encoded once per period with each job's programs reused.

A job can hold thousands of programs (8 jobs x 4,096 make a 10 MiB JSON); converting them to
dicts, JSON and gzip took ~0.6 s of a core each period although programs barely change: the
agent reports a program once and the daemon keeps the same ``Program`` object until a report
or the execution ledger changes it (the ledger makes a new object, never mutates one). So
each job's program list is encoded once, as JSON and as its own gzip member, and reused while
the job's programs are the very same objects; the rest of the snapshot (small) is encoded each
time. Concatenated gzip members are one valid gzip stream (RFC 1952), which
``xmon.wire.client.gunzip`` reads member by member, whole.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import operator
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from xmon.model import Job, Program, Snapshot, sent_fields, snapshot_to_dict
from xmon.wire.proto import xmon_pb2

# A snapshot as it goes to a view: a SnapshotMessage (its JSON, gzip-compressed when large). The
# daemon holds and sends it as it is; only the wire makes one.
EncodedSnapshot: TypeAlias = xmon_pb2.SnapshotMessage

# Snapshots for views are gzip-compressed from this size on (JSON shrinks about tenfold), so a
# large one still fits in a message; smaller ones cost no compression.
GZIP_FROM_BYTES = 256 * 1024
_PROGRAM_FIELDS = sent_fields(Program)  # not its conditionals (xmon.model.NOT_SENT)
_program_values = operator.attrgetter(*_PROGRAM_FIELDS)
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def program_dict(program: Program) -> dict[str, object]:
    """``snapshot_to_dict``'s form of one program, built in one step (every field sent is a
    plain value or a tuple of ints, which JSON writes as a list)."""
    return dict(zip(_PROGRAM_FIELDS, _program_values(program), strict=True))


@dataclass
class _Encoded:
    """One job's program list, encoded; ``programs`` keeps the objects (and so their ids)."""

    programs: tuple[Program, ...]
    text: bytes
    member: bytes | None = None  # the text as one gzip member, made when first needed

    def gzipped(self) -> bytes:
        if self.member is None:
            self.member = gzip.compress(self.text, compresslevel=1, mtime=0)
        return self.member


class SnapshotEncoder:
    """Encodes snapshots for views, keeping each job's encoded programs while they last.

    Each remembered encoding also yields ``changes``: the same snapshot where a job's programs
    are the very objects of the previously remembered one, given as ``{"same_as_job": i}`` (the
    job's index in that snapshot) instead of the list. A view that read the previous one reads
    this one whole from it (``xmon.wire.client.SnapshotReader``), without the catalogue of every
    job every period (xmon.proto ``SubscribeRequest.changes_only``).
    """

    def __init__(self) -> None:
        # A placeholder string no snapshot holds: it marks where a job's programs go.
        self._token = f"xmon-programs-{uuid.uuid4().hex}-"
        # identity of a job's programs -> (that job's index in the remembered snapshot, text)
        self._cache: dict[tuple[int, ...], tuple[int, _Encoded]] = {}
        self.programs_encoded = 0  # programs converted (not reused) so far: for tests
        # The last remembered snapshot's changes from the one remembered before it.
        self.changes: EncodedSnapshot | None = None

    def encode(self, snapshot: Snapshot, remember: bool = True) -> EncodedSnapshot:
        """The snapshot as JSON, gzip-compressed when large. ``remember`` false (a trimmed
        copy of the latest snapshot) reuses encoded programs but keeps none of its own, and
        makes no ``changes``."""
        jobs = snapshot.jobs
        outline = snapshot_to_dict(
            dataclasses.replace(
                snapshot, jobs=tuple(dataclasses.replace(job, programs=()) for job in jobs)
            )
        )
        for i, job in enumerate(outline["jobs"]):
            job["programs"] = f"{self._token}{i}"
        parts = _dumps(outline).encode().split(f'"{self._token}'.encode())
        found = [self._programs(job) for job in jobs]
        encoded = [e for _, e in found]
        message = _message(snapshot, parts, encoded)
        if remember:
            self._cache = {_key(e.programs): (i, e) for i, e in enumerate(encoded)}
            same = [
                _dumps({"same_as_job": before}).encode() if before is not None else e
                for before, e in found
            ]
            unchanged = any(before is not None for before, _ in found)
            self.changes = _message(snapshot, parts, same) if unchanged else message
        return message

    def forget(self) -> None:
        """Keep no encoded programs (no view reads snapshots now)."""
        self._cache = {}
        self.changes = None

    def _programs(self, job: Job) -> tuple[int | None, _Encoded]:
        """The job's programs encoded, and where they were the remembered snapshot's: the
        index of the job that had them (None: new, or no programs)."""
        cached = self._cache.get(_key(job.programs))
        if cached is not None:
            before, encoded = cached
            return (before if job.programs else None), encoded
        self.programs_encoded += len(job.programs)
        text = _dumps([program_dict(p) for p in job.programs]).encode()
        return None, _Encoded(job.programs, text)


def _message(
    snapshot: Snapshot, parts: list[bytes], programs: Sequence[_Encoded | bytes]
) -> EncodedSnapshot:
    """The outline's ``parts`` joined around each job's ``programs`` (encoded, or a text that
    stands for them), compressed when large."""
    # parts: the text before job 0's programs, then "<i>\"" + the text up to the next job's
    pieces: list[tuple[bytes, _Encoded | None]] = [(parts[0], None)]
    for i, part in enumerate(parts[1:]):
        job = programs[i]
        pieces += [(b"", job) if isinstance(job, _Encoded) else (job, None)]
        pieces.append((part[len(f'{i}"') :], None))
    size = sum(len(text) + (len(e.text) if e else 0) for text, e in pieces)
    if size < GZIP_FROM_BYTES:
        payload = b"".join(e.text if e else text for text, e in pieces)
    else:
        payload = b"".join(_members(pieces))
    return xmon_pb2.SnapshotMessage(schema_version=snapshot.schema_version, json=payload)


def fitting_snapshot(
    snapshot: Snapshot, max_bytes: int, encoder: SnapshotEncoder | None = None
) -> tuple[EncodedSnapshot, int]:
    """The encoded snapshot, with fewer programs per job until it fits in ``max_bytes`` (a
    view could not receive it otherwise); also how many programs were left out."""
    encoder = encoder or SnapshotEncoder()
    message = encoder.encode(snapshot)
    keep = max((len(job.programs) for job in snapshot.jobs), default=0)
    while message.ByteSize() > max_bytes and keep > 0:
        keep //= 2
        jobs = tuple(_with_programs(job, keep) for job in snapshot.jobs)
        message = encoder.encode(dataclasses.replace(snapshot, jobs=jobs), remember=False)
    return message, sum(max(0, len(job.programs) - keep) for job in snapshot.jobs)


def _with_programs(job: Job, keep: int) -> Job:
    """The job with only its ``keep`` most recently compiled programs."""
    if len(job.programs) <= keep:
        return job
    return dataclasses.replace(job, programs=job.programs[len(job.programs) - keep :])


def _key(programs: tuple[Program, ...]) -> tuple[int, ...]:
    """Identity of the program objects: a program that changed is a new object (frozen), and
    a cached entry holds its objects, so their ids are not reused while it lasts."""
    return tuple(map(id, programs))


def _members(pieces: list[tuple[bytes, _Encoded | None]]) -> list[bytes]:
    """Gzip members: the cached ones of each job's programs, the text between compressed anew
    (runs of text are joined first, so that empty jobs add no members)."""
    members: list[bytes] = []
    run: list[bytes] = []
    for text, encoded in pieces:
        if encoded is None:
            run.append(text)
            continue
        if run:
            members.append(gzip.compress(b"".join(run), compresslevel=1, mtime=0))
            run = []
        members.append(encoded.gzipped())
    if run:
        members.append(gzip.compress(b"".join(run), compresslevel=1, mtime=0))
    return members
