"""What crosses a process boundary, shared by the agent, the daemon and the views:

* ``proto``: the wire protocol (``xmon.proto``, package ``xmon.v1``) and its generated code, and
  the checked-in subsets of XLA's ``xplane.proto`` and ``hlo.proto`` that samples and programs
  arrive in.
* ``protocol``: the protocol's shared rules: proto <-> model field conversions, message parts,
  the size bounds every side keeps.
* ``snapshot_encoding``: a snapshot's JSON for the views, encoded once a tick, and its frames of
  what changed.
* ``client``: the views' end of the control service: snapshots decoded back into the model,
  captures, a program's HLO.
* ``paths``: where the daemon listens and writes, and which owners of its socket are trusted.

Nothing here imports jax, a gRPC server or the daemon. Of the daemon, only its intake
(``xmon.daemon.intake``) reads or writes the generated protobuf code; the views and the CLI
reach the daemon through ``client``. import-linter keeps both so (pyproject.toml).
"""
