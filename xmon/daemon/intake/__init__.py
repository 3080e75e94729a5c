"""The daemon's intake: where agents' and views' gRPC messages arrive and leave.

The agents' stream (``ingest``: hellos and their pid claims in ``hello``, messages sent in parts
joined in ``parts``, commands down and their results in ``links``, non-finite numbers dropped in
``sanitize`` and kept strings cut in ``report_strings``), the views' control service
(``control``), the server both are served on (``services``), and the one conversion of what
agents send into the daemon's model objects (``convert``).
"""
