"""Our event-file writer against tensorboard's: the same bytes as its RecordWriter, files its
CRC-checking record reader and its EventAccumulator read back, and no numpy in the daemon."""

from __future__ import annotations

import io
import os
import re
import socket
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.summary.writer.record_writer import RecordWriter

from xmon.exporters import tb_events
from xmon.exporters.tensorboard import scalar_event

SCALAR = scalar_event(1_700_000_000.25, 1500, [("steps/steps_total", 20.0), ("a/b", -0.5)])


def tensorboard_frame(data: bytes) -> bytes:
    buffer = io.BytesIO()
    RecordWriter(buffer).write(data)
    return buffer.getvalue()


def records(path: Path) -> list[bytes]:
    """Every record of an event file, through tensorboard's reader, which checks both CRCs."""
    reader, out = PyRecordReader_New(str(path)), []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return out
        out.append(reader.record())


def write_file(logdir: Path, values: list[float], tag: str = "loss") -> Path:
    events = tb_events.EventFile(logdir, ".xmon")
    for step, value in enumerate(values):
        events.add_event(scalar_event(1_700_000_000.0 + step, step, [(tag, value)]))
    events.flush()
    events.close()
    events.close()  # closing twice does nothing
    return events.path


@pytest.mark.parametrize(
    "data", [b"", b"\x00", SCALAR.SerializeToString(), os.urandom(100_000)],
    ids=["empty", "one-byte", "scalar-event", "100KB"],
)  # fmt: skip
def test_framing_is_byte_for_byte_tensorboards(data: bytes) -> None:
    assert tb_events.frame(data) == tensorboard_frame(data)


def test_file_reads_back_with_crc_checks_and_event_accumulator(tmp_path: Path) -> None:
    path = write_file(tmp_path / "new" / "run", [1.0, 2.5, -3.0])
    first, *scalars = (event_pb2.Event.FromString(r) for r in records(path))
    assert first.file_version == "brain.Event:2" and first.wall_time > 0
    assert [e.step for e in scalars] == [0, 1, 2]
    acc = EventAccumulator(str(tmp_path / "new" / "run"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(0, 1.0), (1, 2.5), (2, -3.0)]


@pytest.mark.parametrize("where", ["length", "length-crc", "data", "data-crc"])
def test_a_corrupted_byte_is_detected(tmp_path: Path, where: str) -> None:
    path = write_file(tmp_path, [1.0])
    assert len(records(path)) == 2
    raw = bytearray(path.read_bytes())
    second = 8 + 4 + int.from_bytes(raw[:8], "little") + 4  # where the scalar record starts
    offset = {"length": second, "length-crc": second + 9, "data": second + 14,
              "data-crc": len(raw) - 1}  # fmt: skip
    raw[offset[where]] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(errors.DataLossError):
        records(path)


def test_records_after_the_first_equal_tensorboards_writer(tmp_path: Path) -> None:
    ours, theirs = tb_events.EventFile(tmp_path / "ours"), EventFileWriter(str(tmp_path / "tb"))
    for step in range(3):
        event = scalar_event(1_700_000_000.0 + step, step, [("x", step / 3)])
        ours.add_event(event)
        theirs.add_event(event)
    ours.close()
    theirs.close()
    [tb_file] = (tmp_path / "tb").iterdir()
    ours_records, tb_records = records(ours.path), records(tb_file)
    assert len(ours_records) == 4 and ours_records[1:] == tb_records[1:]
    # only the first record (wall time, writer name) differs; the framing after it is the same
    ours_bytes = ours.path.read_bytes()[len(tb_events.frame(ours_records[0])) :]
    assert ours_bytes == tb_file.read_bytes()[len(tb_events.frame(tb_records[0])) :]


def test_file_name_is_tensorboards(tmp_path: Path) -> None:
    a = tb_events.EventFile(tmp_path, ".xmon")
    b = tb_events.EventFile(tmp_path, ".xmon")
    a.close()
    b.close()
    host, pid = re.escape(socket.gethostname()), os.getpid()
    pattern = rf"events\.out\.tfevents\.\d{{10}}\.{host}\.{pid}\.(\d+)\.xmon"
    uids = [int(re.fullmatch(pattern, e.path.name)[1]) for e in (a, b)]  # type: ignore[index]
    assert uids[1] > uids[0] and a.path.parent == tmp_path
    c = tb_events.EventFile(tmp_path)  # no suffix
    c.close()
    assert c.path.name.endswith(f".{pid}.{uids[1] + 1}")


def test_flush_makes_events_readable_before_close(tmp_path: Path) -> None:
    events = tb_events.EventFile(tmp_path)
    assert len(records(events.path)) == 1  # file_version, flushed at once
    events.add_event(SCALAR)
    events.flush()
    assert len(records(events.path)) == 2
    events.close()


def test_an_unusable_logdir_raises_to_the_caller(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError):
        tb_events.EventFile(blocker)
    with pytest.raises(OSError):
        tb_events.EventFile(blocker / "run")
