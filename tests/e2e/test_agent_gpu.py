"""The agent's FLOP counting and memory sampling on a real GPU (skipped without one).

On GPU, XLA lowers f32 dots to cuBLAS custom-calls that ``cost_analysis()`` counts as ~0 FLOPs
(measured on an H100 with jax 0.11: 16.8 M reported for a 4096² matmul). The agent adds the
GEMM custom-calls it finds in the optimized HLO, so the program's FLOPs are the true 2·N³.
Runs in a subprocess with the GPU backend, since this test session's jax is pinned to CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.procs import REPO, base_env

pytestmark = [pytest.mark.gpu, pytest.mark.e2e, pytest.mark.xdist_group("agent-gpu")]  # one job

SCRIPT = r"""
import json, jax, jax.numpy as jnp, xmon
if jax.default_backend() != "gpu":
    print(json.dumps({"skip": f"jax backend is {jax.default_backend()}"})); raise SystemExit
agent = xmon.attach(job_name="gpu-flops", socket_path="/nonexistent/xmon.sock")
out = {}
for dtype in ("float32", "bfloat16"):
    def matmul(a, b):
        return jnp.tanh(a @ b).sum()
    matmul.__name__ = f"matmul_{dtype}"
    n = 4096
    a = jnp.ones((n, n), dtype); b = jnp.ones((n, n), dtype)
    jax.jit(matmul)(a, b).block_until_ready()
    agent.hlo.drain()  # GEMM custom-calls are counted on the agent's thread
    record = agent.compiles.program_by_name(f"jit_matmul_{dtype}")
    out[dtype] = {"flops": record.flops, "flops_xla": record.flops_xla,
                  "custom_call_flops": record.custom_call_flops}
stats = jax.local_devices()[0].memory_stats()
out["memory_keys"] = sorted(stats or {})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def gpu_run() -> dict[str, object]:
    env = base_env()
    env.pop("JAX_PLATFORMS", None)
    env.pop("XLA_FLAGS", None)
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=REPO,
        timeout=600,
    )  # fmt: skip
    if result.returncode != 0:
        if "No module named" in result.stderr or "Unable to initialize backend" in result.stderr:
            pytest.skip("no CUDA-enabled jax here")
        raise AssertionError(result.stderr)
    out = json.loads(result.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(str(out["skip"]))
    return dict(out)


def test_f32_gemm_custom_calls_are_counted_and_bf16_is_not_double_counted(
    gpu_run: dict[str, object],
) -> None:
    out = gpu_run
    true_flops = 2 * 4096**3
    f32, bf16 = out["float32"], out["bfloat16"]
    assert isinstance(f32, dict) and isinstance(bf16, dict)
    # Within 1 %: the tanh and the sum add a few million FLOPs on top of the dot.
    assert f32["flops"] == pytest.approx(true_flops, rel=0.01), f32
    assert bf16["flops"] == pytest.approx(true_flops, rel=0.01), bf16
    assert f32["custom_call_flops"] > 0 or f32["flops_xla"] >= 0.99 * true_flops


def test_pjrt_memory_stats_are_sampled_on_gpu(gpu_run: dict[str, object]) -> None:
    keys = gpu_run["memory_keys"]
    assert {"bytes_in_use", "bytes_limit", "peak_bytes_in_use"} <= set(keys)  # type: ignore[arg-type]
