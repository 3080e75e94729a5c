"""Fleet: one multi-process (multi-host) JAX job seen as one job.

Every process of a ``jax.distributed`` job runs its own agent and reports to the daemon on its
own host; daemons never talk to each other. What makes the processes one job is a shared *job
key* (:mod:`xmon.agent.identity`) on their series, and the cross-host questions (which process
is the straggler, which stopped first in a hang, which dropped out) are answered where all
hosts' series meet: in Prometheus, by the recording and alert rules, and in ``xmon fleet``,
which reads Prometheus's HTTP API and judges with the same pure functions
(:mod:`xmon.fleet.judge`).
"""
