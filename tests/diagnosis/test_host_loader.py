"""A hand-written tokenising loader that keeps a core busy (numpy and Python before each small
jitted step): host-bound, said with the fix for a busy process. Its own module, so that no other
job shares the host's cores with it: beside the pathology suite's seven jobs on a 2-core host its
threads wait for a core the others hold, which is another finding (an oversubscribed host).
"""

from __future__ import annotations

from collections.abc import Iterator

import pathology_jobs as scripts
import pytest
from job_suite import JobSuite, job_suite

from xmon.model import Finding

from support.host_load import assert_host_bound_verdict_holds
from support.procs import wait_for

# The module's jobs share one daemon. host_bound's verdict is a warning, or info on a host
# whose other processes hold the cores (checked against the host the test measures); the
# process's own CPU use is asserted too, which others' load moves, so they run alone.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("host-loader"), pytest.mark.alone]

FINDING_SECONDS = 90


@pytest.fixture(scope="module")
def loader_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobSuite]:
    root = tmp_path_factory.mktemp("loader")
    jobs = {"tokenising": scripts.NUMPY_LOADER}
    with job_suite(root, jobs, FINDING_SECONDS, XMON_LEDGER_INTERVAL="3") as suite:
        yield suite


def test_a_loader_that_keeps_the_host_cpu_busy_is_host_bound(loader_suite: JobSuite) -> None:
    job, finding = loader_suite.finding("tokenising", "host_bound")
    assert_host_bound_verdict_holds(finding, job.pid)  # a warning, unless the host is shared
    assert "waits for the host" in finding.summary
    assert job.devices and max(d.busy_ratio or 0.0 for d in job.devices) < 0.5
    key = "job process CPU (cores)"

    def with_cpu() -> Finding | None:  # the process's CPU comes with the host's next samples
        found = [f for f in (loader_suite.job("tokenising") or job).findings
                 if f.kind == "host_bound" and key in dict(f.evidence)]  # fmt: skip
        return found[0] if found else None

    finding = wait_for(with_cpu, 30, "the process's CPU in the host-bound evidence", 1.0)
    assert_host_bound_verdict_holds(finding, job.pid)
    cores = float(dict(finding.evidence)[key])
    # The loader computes: a sleeping one uses ~0.02 of a core. Where other processes hold the
    # cores it gets less than it wants, but still far more than a sleeper.
    assert cores > (0.5 if finding.severity == "warning" else 0.2), finding.evidence
    if finding.severity == "warning":
        # At a whole core the fix says to profile the Python between steps, else to look for
        # waits; on a shared host it says to give the job its cores.
        assert ("keeps a core busy" in finding.fix) == (cores >= 0.9), (cores, finding.fix)
