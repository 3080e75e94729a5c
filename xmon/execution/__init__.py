"""Execution truth: what a job's programs cost and what actually ran.

* ``loop_cost``: loop-aware cost of one compiled program from its optimized HLO (every while-loop
  body counted once per trip), beside XLA's own figure; ``trip_count`` reads the trip counts.
* ``ledger``: the execution ledger, read from short in-memory profiler samples of the job:
  executions per second of each program, device time per program, device busy ratio.
* ``rates``: per-step and per-second work derived from the two (pure functions).
* ``xplane``: the parts of the profiler's XSpace format both the ledger and trace captures read.

Nothing here imports jax: the agent hands XLA's per-computation cost in as a callable, and the
daemon parses the profiler samples.
"""
