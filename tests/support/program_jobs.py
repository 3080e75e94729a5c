"""Job snapshots for the programs view's tests."""

from __future__ import annotations

from xmon.model import (
    DeviceInfo,
    DeviceMemory,
    Job,
    JobDevice,
    Program,
    Utilization,
)


def job(name: str = "train", pid: int = 1, kind: str = "TPU v6 lite", **util: float) -> Job:
    device = JobDevice(DeviceInfo(0, "tpu", kind), DeviceMemory())
    programs = (
        Program("aaaa1111", "jit_matmul", "jit(matmul)", flops=1e12, bytes_accessed=1e9,
                argument_bytes=10, temp_bytes=5, compile_seconds=2.0),
        Program("bbbb2222", "jit_add", "jit(add)", flops=1e6, bytes_accessed=3e6,
                compile_seconds=0.1),
        Program("cccc3333", "jit_custom", None, flops=None, bytes_accessed=None),
    )  # fmt: skip
    return Job(job_name=name, pid=pid, hostname="h", platform="tpu", jax_version="",
               jaxlib_version="", devices=(device,), programs=programs,
               utilization=Utilization(**util))  # fmt: skip
