"""What the views share (``xmon top``, ``xmon fleet`` and the CLI's commands): text made safe
for a terminal, the line a capture in progress shows. Views run in their own process, never in
the job or the daemon.
"""
