"""A v4 TPU VM's tpu-env attribute (the topology tests)."""

from __future__ import annotations

# The shape of a v4 TPU VM's tpu-env attribute (keys as jax and torch_xla read them).
TPU_ENV = """ACCELERATOR_TYPE: 'v4-16'
NODE_ID: 'train-v4-16'
WORKER_ID: '1'
TOPOLOGY: '2x2x2'
MEGASCALE_SLICE_ID: '3'
MEGASCALE_NUM_SLICES: '4'
ZONE: 'us-central2-b'
"""
