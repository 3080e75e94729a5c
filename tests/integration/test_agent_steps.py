"""StepTimer: sums that add up to the job's clock, open steps across threads, boundaries."""

from __future__ import annotations

from pathlib import Path


def test_xprof_sees_the_steps_of_a_job_marked_only_with_xmon_step(tmp_path: Path) -> None:
    """While a trace records, the outermost xmon.step() is also jax's StepTraceAnnotation:
    XProf's overview finds the steps (without it: "No step marker observed", 0.0 ms steps)."""
    import re
    import time

    import jax
    import jax.numpy as jnp
    from xprof.convert import raw_to_tool_data

    import xmon

    agent = xmon.attach(job_name="xprof-steps", socket_path=tmp_path / "none.sock", ledger=False)
    try:
        f = jax.jit(lambda a: jnp.tanh(a @ a))
        a = f(jnp.ones((128, 128))).block_until_ready()
        jax.profiler.start_trace(str(tmp_path / "trace"))
        for _ in range(20):
            with xmon.step():
                with xmon.step():  # nested: one step, one annotation
                    a = f(a).block_until_ready()
                time.sleep(0.01)
        jax.profiler.stop_trace()
    finally:
        xmon.detach()
    assert agent.steps.steps_total == 20  # the nested steps and their annotations count once
    (xplane,) = (tmp_path / "trace").rglob("*.xplane.pb")
    data, _ = raw_to_tool_data.xspace_to_tool_data([xplane], "overview_page", {})
    text = data if isinstance(data, str) else data.decode(errors="ignore")
    assert "No step marker observed" not in text
    average = re.findall(r"\"steptime_ms_average\":\"?([0-9.]+)", text)
    assert average and 10.0 <= float(average[0]) < 100.0, average
