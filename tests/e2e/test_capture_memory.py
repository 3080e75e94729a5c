"""Captures do not inflate the job: what the profiler frees after a trace goes back to the
system (glibc keeps it in its arenas otherwise: ~0.5 GB after 7 captures of a busy job)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from xmon.agent.commands import return_freed_memory

# A busy JAX job traced 6 times by the agent's own command runner (as the daemon asks it).
TRACED_JOB = textwrap.dedent(r"""
    import os, queue, sys, tempfile, threading, time
    import jax, jax.numpy as jnp
    from xmon.agent.commands import CommandRunner
    from xmon.wire.proto import xmon_pb2

    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

    @jax.jit
    def step(w, x):
        return w - 0.01 * jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)

    w, x, stop = jnp.ones((512, 512)), jnp.ones((256, 512)), threading.Event()
    def loop():
        global w
        while not stop.is_set():
            w = step(w, x).block_until_ready()
    thread = threading.Thread(target=loop)
    thread.start()
    time.sleep(3)
    replies = queue.Queue()
    runner = CommandRunner(replies.put)
    before = rss()
    for i in range(6):
        trace = xmon_pb2.StartTrace(duration_ms=1500, log_dir=tempfile.mkdtemp())
        runner.submit(xmon_pb2.DaemonCommand(command_id=i, start_trace=trace))
        assert replies.get(timeout=120).ok
        print("AFTER", i, rss() - before, flush=True)
    time.sleep(1)
    growth = rss() - before
    stop.set()
    thread.join()  # not killed inside XLA at exit
    print("GROWTH", growth)
""")


def test_the_c_library_can_return_freed_memory() -> None:
    assert return_freed_memory() is True  # glibc, as on every machine the tests run


def test_six_captures_leave_the_job_at_most_a_little_bigger() -> None:
    run = subprocess.run([sys.executable, "-c", TRACED_JOB], capture_output=True, text=True,
                         timeout=600, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin",
                         "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    growth = int(run.stdout.split("GROWTH")[1])
    # Without giving it back: +300..600 MiB; with it, what the profiler keeps (50..110 MiB).
    assert growth < 160 * 2**20, f"{growth / 2**20:.0f} MiB more after 6 captures"
