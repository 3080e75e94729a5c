"""A small, synchronous writer of TensorBoard event files (``events.out.tfevents.*``).

Why not tensorboard's own ``EventFileWriter``: importing ``tensorboard.summary.writer`` runs
``tensorboard/summary/__init__.py``, which imports numpy, fsspec and the TensorFlow stub (about
14 MiB of resident memory in a daemon with a 50 MB budget), and every writer runs a thread that
wakes about once a second. Here only the event protos are imported, and nothing runs in a thread:
``add_event`` appends to a buffered file, ``flush`` hands it to the OS, and I/O errors (disk
full, logdir not writable) reach the caller.

The bytes on disk are TensorBoard's (TFRecord framing, masked CRC32C; file name and first
record as ``EventFileWriter`` writes them); the tests compare them byte for byte with
tensorboard's own ``RecordWriter`` and read the files back with its reader.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import google_crc32c
from tensorboard.compat.proto import event_pb2

FILE_VERSION = "brain.Event:2"
_MASK_DELTA = 0xA282EAD8
_uids = itertools.count()  # process-wide, as tensorboard's writer numbers its files


def masked_crc32c(data: bytes) -> int:
    """CRC32C of ``data``, masked as TFRecord stores it (rotated right by 15, plus a constant)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: ``<Q`` length, masked CRC of those 8 bytes, data, masked CRC of the data."""
    header = struct.pack("<Q", len(data))
    header_crc = struct.pack("<I", masked_crc32c(header))
    return header + header_crc + data + struct.pack("<I", masked_crc32c(data))


def file_name(wall_time: float, filename_suffix: str = "") -> str:
    """``events.out.tfevents.<seconds>.<host>.<pid>.<uid><suffix>``, as tensorboard names it."""
    uid = next(_uids)
    host, pid = socket.gethostname(), os.getpid()
    return f"events.out.tfevents.{int(wall_time):010d}.{host}.{pid}.{uid}{filename_suffix}"


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class EventFile:
    """One new event file in ``logdir`` (created, with parents, if missing).

    With ``dir_fd`` (an open descriptor of ``logdir``, see ``tb_logdir.open_run_dir``) the file
    is created in that very directory, whatever links appear on the path since; either way it
    is a new file (``O_EXCL | O_NOFOLLOW``), never an existing file or a link's target. The
    first record, ``file_version``, is written and flushed at once, as tensorboard does.
    """

    def __init__(
        self,
        logdir: Path,
        filename_suffix: str = "",
        wall: Callable[[], float] = time.time,
        dir_fd: int | None = None,
    ) -> None:
        created = wall()
        name = file_name(created, filename_suffix)
        self._path = logdir / name
        if dir_fd is None:
            logdir.mkdir(parents=True, exist_ok=True)
        fd = os.open(name if dir_fd is not None else self._path, _NEW_FILE, 0o644, dir_fd=dir_fd)
        self._file = os.fdopen(fd, "wb")  # open until close()
        try:
            self.add_event(event_pb2.Event(wall_time=created, file_version=FILE_VERSION))
            self.flush()
        except BaseException:
            self._file.close()
            raise

    @property
    def path(self) -> Path:
        return self._path

    def add_event(self, event: event_pb2.Event) -> None:
        self._file.write(frame(event.SerializeToString()))

    def flush(self) -> None:
        self._file.flush()

    def unlinked(self) -> bool:
        """Whether the file was deleted under us (its run directory or the logdir removed):
        writing on would go to a file nobody can read."""
        try:
            return os.fstat(self._file.fileno()).st_nlink == 0
        except (OSError, ValueError):  # closed
            return True

    def close(self) -> None:
        """Flush and close; closing again does nothing."""
        self._file.close()
