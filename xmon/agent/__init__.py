"""The in-job agent (the only part of xmon that imports jax).

``attach()`` registers jax.monitoring listeners and the compile hook and starts one background
thread; it never initialises a JAX backend, never synchronises a device and never raises into
the job once running. Without a daemon it keeps running and counts what it could not send.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from xmon.agent.core import Agent
from xmon.agent.goodput import span_kind
from xmon.agent.sampler import config_from
from xmon.execution.rates import flops_per_token

__all__ = [
    "Agent",
    "attach",
    "checkpointing",
    "current",
    "declare_model_flops",
    "detach",
    "flops_per_token",
    "is_attached",
    "step",
]

log = logging.getLogger("xmon.agent")

_lock = threading.Lock()
_agent: Agent | None = None


def attach(
    job_name: str | None = None,
    period: float = 1.0,
    socket_path: str | os.PathLike[str] | None = None,
    step_annotations: bool = True,
    ledger: bool | None = None,
    ledger_interval: float | None = None,
    ledger_duration: float | None = None,
    job_key: str | None = None,
) -> Agent:
    """Start reporting this job to the local xmon daemon. Idempotent: a second call returns
    the running agent (a different job_name or period is ignored with a warning).

    The execution ledger (what ran, how often; xmon.agent.sampler) records the job for
    ``ledger_duration`` seconds every ``ledger_interval`` seconds; ``ledger=False`` (or
    ``XMON_LEDGER=off``) turns it off, and with it executed FLOPs, HFU and device busy ratio.

    ``job_key`` (or ``XMON_JOB_KEY``) names the job every process of a multi-process job
    belongs to; by default it comes from ``jax.distributed`` (xmon.agent.identity).
    """
    global _agent
    with _lock:
        if _agent is not None:
            if job_name and job_name != _agent.job_name:
                log.warning("xmon: already attached as %r; ignoring %r", _agent.job_name, job_name)
            return _agent
        agent = Agent(
            job_name=job_name,
            period=period,
            socket_path=Path(socket_path) if socket_path else None,
            step_annotations=step_annotations,
            ledger=config_from(ledger, ledger_interval, ledger_duration),
            job_key=job_key,
        )
        agent.start()
        _agent = agent
    atexit.register(_detach_at_exit)
    return agent


def detach() -> None:
    """Stop the agent, sending its last report if the daemon is there (bounded wait)."""
    global _agent
    with _lock:
        agent, _agent = _agent, None
    if agent is not None:
        agent.stop()


def _forget_in_child() -> None:
    """After ``fork()``, in the child: it has the agent's objects but none of its threads, and
    its sockets and gRPC state are the parent's, so it is not the attached job. The agent is
    forgotten there without being stopped (stopping would send through the parent's channel)
    and its Python hooks are undone, so the child runs as it would without xmon. The child
    may attach again."""
    global _agent, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    agent, _agent = _agent, None
    if agent is not None:
        agent.forget_in_child()


os.register_at_fork(after_in_child=_forget_in_child)


def _detach_at_exit() -> None:
    agent = _agent
    try:
        detach()
    except Exception:  # noqa: BLE001 - interpreter shutdown: never a traceback from us
        return
    if agent is not None:
        counters = agent.transport.counters
        if counters.reports_dropped and os.environ.get("XMON_QUIET") != "1":
            print(
                f"xmon: job {agent.job_name!r}: {counters.reports_sent} reports sent, "
                f"{counters.reports_dropped} dropped while the daemon at {agent.socket_path} "
                f"was unreachable ({counters.reconnects} reconnects)",
                file=sys.stderr,
            )


def is_attached() -> bool:
    return _agent is not None


def current() -> Agent | None:
    return _agent


class _NoStep(AbstractContextManager[None]):
    def __exit__(self, *exc: object) -> None:
        return None


def step(
    fn: Callable[..., Any] | None = None,
    *,
    flops: float | None = None,
    bytes_accessed: float | None = None,
) -> Any:
    """Mark training steps. ``with xmon.step(): ...`` or ``@xmon.step`` / ``xmon.step(fn)``.

    Hardware FLOPs per step come from what the job executed (the execution ledger); ``flops=``
    declares the step's *model* FLOPs (as :func:`declare_model_flops`), which MFU is computed
    from. Without an attached agent this is a no-op, so instrumented code runs unchanged.
    """
    agent = _agent
    if agent is not None:
        if flops is not None:
            agent.steps.declared_flops_per_step = float(flops)
        if bytes_accessed is not None:
            agent.steps.declared_bytes_per_step = float(bytes_accessed)
    if fn is not None:
        return _wrap_lazily(fn)
    return agent.steps.step() if agent is not None else _NoStep()


def checkpointing(what: str = "save") -> AbstractContextManager[None]:
    """Mark the time the job's thread spends saving (``"save"``) or restoring (``"restore"``) a
    checkpoint written by other means than Orbax (Orbax's own durations are read from
    jax.monitoring). A no-op without an attached agent, after checking ``what``."""
    span_kind(what)  # checked with or without an agent
    agent = _agent
    return agent.goodput.span(what) if agent is not None else _NoStep()


def declare_model_flops(
    per_step: float | None = None,
    *,
    per_token: float | None = None,
    tokens_per_step: float | None = None,
) -> None:
    """Declare the model FLOPs of one training step, for MFU (PaLM's model FLOPs utilisation).

    Either ``per_step``, or ``per_token`` with ``tokens_per_step`` (e.g. ``per_token =
    xmon.flops_per_token(n_params)``, the 6·N rule for a dense decoder's forward and backward
    pass). ``tokens_per_step`` alone also gives tokens/s. Without a declaration xmon shows HFU
    (the FLOPs XLA counts) and no MFU. A no-op without an attached agent.
    """
    values = {"per_step": per_step, "per_token": per_token, "tokens_per_step": tokens_per_step}
    for name, value in values.items():
        if value is not None and not (value > 0 and value != float("inf")):
            raise ValueError(f"xmon.declare_model_flops: {name} must be positive, got {value}")
    if per_token is not None and tokens_per_step is None:
        raise ValueError("xmon.declare_model_flops: per_token needs tokens_per_step")
    if per_step is not None and per_token is not None:
        raise ValueError("xmon.declare_model_flops: give per_step or per_token, not both")
    agent = _agent
    if agent is None:
        return
    if per_token is not None and tokens_per_step is not None:
        per_step = per_token * tokens_per_step
    if per_step is not None:
        agent.steps.declared_flops_per_step = float(per_step)
    if tokens_per_step is not None:
        agent.declared_tokens_per_step = float(tokens_per_step)


def _wrap_lazily(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator applied before attach() still times steps once the agent runs."""
    import functools

    @functools.wraps(fn)
    def stepped(*args: Any, **kwargs: Any) -> Any:
        agent = _agent
        if agent is None:
            return fn(*args, **kwargs)
        agent.steps.begin()
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            agent.steps.failed(exc)
            raise
        finally:
            agent.steps.end()

    return stepped
