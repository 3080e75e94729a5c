"""What checking a hello's pid claim costs the daemon (xmon.daemon.peers.PidVerifier.check).

A unix socket bound and linked into place as the daemon's is, another process holding N
connections to it, and the check run for that process (verified) and for a process holding
none (refuted: every connected process's status is read for a container's pid first). The
check runs in a worker thread of the daemon, once per hello, and gives up at 0.5 s.

    python benchmarks/pid_checks.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xmon.daemon.peers import CHECK_SECONDS, Verdict

from common import machine, summary, table, today, write_section
from support.peer_listener import HOLDER, Listener

BUDGET_SECONDS = 0.050  # a tenth of the check's own limit (CHECK_SECONDS): the hello waits for it


def measure(connections: int, repeats: int) -> list[object]:
    with tempfile.TemporaryDirectory(prefix="xmon-pid-checks-") as tmp:
        listener = Listener(Path(tmp))
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(listener.public),
                                   str(connections)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        sleeper = subprocess.Popen(["sleep", "600"])
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 30
            while len(listener.accepted) < connections and time.monotonic() < deadline:
                time.sleep(0.01)
            verifier = listener.verifier()
            times: dict[Verdict, list[float]] = {Verdict.VERIFIED: [], Verdict.REFUTED: []}
            for _ in range(repeats):
                for expected, pid in ((Verdict.VERIFIED, holder.pid),
                                      (Verdict.REFUTED, sleeper.pid)):  # fmt: skip
                    started = time.perf_counter()
                    verdict = verifier.check(pid).verdict
                    times[expected].append(time.perf_counter() - started)
                    assert verdict is expected, (verdict, expected)
        finally:
            sleeper.kill()
            holder.communicate(timeout=30)
            listener.close()
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    verified, refuted = summary(times[Verdict.VERIFIED]), summary(times[Verdict.REFUTED])
    within = max(verified["median"], refuted["median"]) < BUDGET_SECONDS
    return [
        f"{connections:,}",
        processes,
        f"{verified['median'] * 1e3:.2f} / {verified['p99'] * 1e3:.2f}",
        f"{refuted['median'] * 1e3:.2f} / {refuted['p99'] * 1e3:.2f}",
        "yes" if within else "**no**",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes, repeats = ((10, 300), 5) if args.quick else ((10, 300, 2000), 50)
    rows = []
    for connections in sizes:
        rows.append(measure(connections, repeats))
        print(" | ".join(str(c) for c in rows[-1]), flush=True)
    header = ["connections on the socket", "processes on the host",
              "verified: median / p99 (ms)", "refuted: median / p99 (ms)",
              f"median < {BUDGET_SECONDS * 1e3:g} ms"]  # fmt: skip
    body = (
        f"## Pid checks\n\n{today()} — {machine()}\n\n"
        f"`benchmarks/pid_checks.py`: the check of a hello's pid claim, {repeats} times each, "
        f"against a socket linked into place as the daemon's with another process holding the "
        f"connections: verified (the holder) and refuted (a process holding none; the status "
        f"of every connected process is read for a container whose pid it is first). It runs "
        f"in a worker "
        f"thread, once per hello, and gives up after {CHECK_SECONDS:g} s.\n\n" + table(header, rows)
    )
    write_section("pid-checks", body)
    print(body)


if __name__ == "__main__":
    main()
