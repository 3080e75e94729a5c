"""Goodput: where every second of a job's wall time went (docs/goodput.md).

``account`` is the wall-time account the agent keeps (pure interval arithmetic, no jax);
``split`` is the daemon's side, which splits stepping time with the device busy ratio and
keeps the rolling windows. The agent feeds the account in xmon.agent.goodput; the finding is
xmon.findings.goodput.
"""
