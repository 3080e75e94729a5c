"""The text summaries of a TensorBoard run, read back (TensorBoard findings)."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.util import tensor_util


def texts(run: Path) -> dict[str, list[tuple[int, str]]]:
    """tag -> [(step, text)] of every text summary in the run, as TensorBoard reads them."""
    acc = EventAccumulator(str(run), size_guidance={"tensors": 0})
    acc.Reload()
    tags = acc.PluginTagToContent(text_metadata.PLUGIN_NAME)
    out = {}
    for tag in (t for t in tags if t.startswith("findings/")):  # not the step axis' note
        events = acc.Tensors(tag)
        out[tag] = [(e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode())
                    for e in events]  # fmt: skip
    return out
