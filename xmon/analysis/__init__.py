"""Pure judgements the agent, the daemon and the views share: when a compile is a steady-state
recompile and what changed (compiles), when a job has stalled (stall). No I/O, no jax: what the
job's agent counts and what the daemon finds follow the same rules.
"""
