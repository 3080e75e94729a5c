"""xmon: a PJRT device profiler and monitoring daemon for JAX jobs.

In a JAX job::

    import xmon
    xmon.attach(job_name="train")
    for batch in data:
        with xmon.step():
            state = train_step(state, batch)

``import xmon`` itself does not import jax; the agent (``xmon.agent``) does, when attached.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "attach",
    "checkpointing",
    "declare_model_flops",
    "detach",
    "flops_per_token",
    "is_attached",
    "step",
]


def attach(*args: Any, **kwargs: Any) -> Any:
    """Start the in-job agent (see :func:`xmon.agent.attach`)."""
    from xmon import agent

    return agent.attach(*args, **kwargs)


def detach() -> None:
    """Stop the in-job agent and flush its last report."""
    from xmon import agent

    agent.detach()


def step(*args: Any, **kwargs: Any) -> Any:
    """Time a training step: ``with xmon.step():`` or ``@xmon.step`` (see xmon.agent.steps)."""
    # Called every step: the agent's module is looked up once, not imported on each call.
    return (_agent_module or _load_agent()).step(*args, **kwargs)


_agent_module: Any = None


def _load_agent() -> Any:
    global _agent_module
    from xmon import agent

    _agent_module = agent
    return agent


def checkpointing(what: str = "save") -> Any:
    """``with xmon.checkpointing("save"):`` (or ``"restore"``) around a checkpoint the job
    writes by means other than Orbax (whose own events xmon reads): its time is counted as
    checkpointing in the job's wall-time account, not as a stall (see xmon.agent.checkpointing)."""
    return (_agent_module or _load_agent()).checkpointing(what)


def is_attached() -> bool:
    import sys

    agent = sys.modules.get("xmon.agent")
    return bool(agent is not None and agent.is_attached())


def declare_model_flops(*args: Any, **kwargs: Any) -> None:
    """Declare model FLOPs per step (or per token) for MFU (see xmon.agent.declare_model_flops)."""
    from xmon import agent

    agent.declare_model_flops(*args, **kwargs)


def flops_per_token(
    n_params: float, n_layers: int = 0, context: int = 0, d_model: int = 0
) -> float:
    """6·N (+ attention) model FLOPs per training token (see xmon.execution.rates)."""
    from xmon.execution import rates

    return rates.flops_per_token(n_params, n_layers, context, d_model)
