"""xmon's own health: daemons and scrapes, collectors, agents and dropped reports, and the
execution ledger (profiler samples) of each job."""

from __future__ import annotations

from dashboards.grafana import Board, Panel, Row, Variable, q

H = 'instance=~"$instance"'
RATE = "[$__rate_interval]"
JOB = "{{instance}} {{job_name}} ({{pid}})"
COLLECTOR = "{{instance}} {{collector}}"


def _daemons() -> Row:
    return Row("Daemons and scrapes", (
        Panel("Daemons", "Version, uptime and snapshot age of each daemon.",
              (q(f"xmon_build_info{{{H}}}"), q(f"xmon_up{{{H}}}"),
               q(f"time() - xmon_daemon_start_time_seconds{{{H}}}"),
               q(f"time() - xmon_snapshot_timestamp_seconds{{{H}}}")), "table", width=24,
              height=6),
        Panel("Scrape up", "1 when Prometheus could scrape the daemon's /metrics.",
              (q(f"up{{{H}}}", "{{instance}}"),), width=8, max=1),
        Panel("Scrape duration", "Seconds Prometheus took to scrape /metrics.",
              (q(f"scrape_duration_seconds{{{H}}}", "{{instance}}"),), unit="s", width=8),
        Panel("Samples per scrape", "Series in one scrape: watch for cardinality growth.",
              (q(f"scrape_samples_scraped{{{H}}}", "{{instance}}"),), width=8),
        Panel("Snapshot age", "Seconds since the daemon's latest snapshot (should stay near "
              "the sample period).",
              (q(f"time() - xmon_snapshot_timestamp_seconds{{{H}}}", "{{instance}}"),),
              unit="s"),
        Panel("Daemon ready", "1 once the daemon has taken its first snapshot.",
              (q(f"xmon_up{{{H}}}", "{{instance}}"),), max=1),
    ))  # fmt: skip


def _collectors() -> Row:
    return Row("Collectors", (
        Panel("Collectors", "up: the last run succeeded; present: its hardware or service is "
              "on the host (0 is not an error).",
              (q(f"xmon_collector_up{{{H}}}"), q(f"xmon_collector_present{{{H}}}")), "table",
              width=8),
        Panel("Collector duration", "Duration of each collector's last run.",
              (q(f"xmon_collector_duration_seconds{{{H}}}", COLLECTOR),), unit="s", width=8),
        Panel("Collector errors per minute", "Failed collector runs.",
              (q(f"60 * rate(xmon_collector_errors_total{{{H}}}{RATE})", COLLECTOR),),
              width=8),
    ))  # fmt: skip


def _agents() -> Row:
    return Row("Agents", (
        Panel("Agents connected", "Agent streams open to each daemon.",
              (q(f"xmon_agents_connected{{{H}}}", "{{instance}}"),), width=8),
        Panel("Reports per second", "Reports received from agents, and rejected ones.",
              (q(f"rate(xmon_daemon_reports_received_total{{{H}}}{RATE})",
                 "received {{instance}}"),
               q(f"rate(xmon_daemon_reports_rejected_total{{{H}}}{RATE})",
                 "rejected {{instance}}")), width=8),
        Panel("Agent disconnects per minute", "Agent streams that ended (jobs exiting, or "
              "agents reconnecting).",
              (q(f"60 * rate(xmon_daemon_agent_disconnects_total{{{H}}}{RATE})",
                 "{{instance}}"),), width=8),
        Panel("Dropped per minute", "Reports and events the agents dropped because the "
              "daemon was absent or slow.",
              (q(f"60 * rate(xmon_agent_reports_dropped_total{{{H}}}{RATE})", "reports " + JOB),
               q(f"60 * rate(xmon_agent_events_dropped_total{{{H}}}{RATE})", "events " + JOB)),
              width=8),
        Panel("Reconnects per minute", "Times each agent reconnected to the daemon.",
              (q(f"60 * rate(xmon_agent_reconnects_total{{{H}}}{RATE})", JOB),), width=8),
        Panel("Time since last report", "Seconds since each job's latest report.",
              (q(f"time() - xmon_agent_last_report_timestamp_seconds{{{H}}}", JOB),),
              unit="s", width=8),
        Panel("Reports sent per second", "Reports each agent sent.",
              (q(f"rate(xmon_agent_reports_sent_total{{{H}}}{RATE})", JOB),), width=12),
        Panel("Agent overhead", "Share of wall time each job spends in the agent's thread.",
              (q(f"rate(xmon_agent_overhead_seconds_total{{{H}}}{RATE})", JOB),),
              unit="percentunit", width=12),
    ))  # fmt: skip


def _ledger() -> Row:
    return Row("Execution ledger", (
        Panel("Execution samples per minute", "Short profiler samples each agent took for "
              "the execution ledger (busy ratios, executions per program).",
              (q(f"60 * rate(xmon_agent_ledger_samples_total{{{H}}}{RATE})", JOB),), width=8),
        Panel("Samples skipped per minute", "Samples an agent did not take: the profiler was "
              "busy (a capture or the job's own trace), or the sample was too large.",
              (q(f"60 * rate(xmon_agent_ledger_samples_skipped_total{{{H}}}{RATE})", JOB),),
              width=8),
        Panel("Sample parse errors per minute", "Samples the daemon could not read.",
              (q(f"60 * rate(xmon_job_ledger_parse_errors_total{{{H}}}{RATE})", JOB),),
              width=8),
        Panel("Samples in the window", "Samples the rates and busy ratios come from.",
              (q(f"xmon_job_ledger_samples{{{H}}}", JOB),), width=8),
        Panel("Sampled share of the window", "Profiler time of the window's samples over "
              "the wall time they span.",
              (q(f"xmon_job_ledger_sampled_seconds{{{H}}}"
                 f" / xmon_job_ledger_window_seconds{{{H}}}", JOB),), unit="percentunit",
              width=8),
        Panel("Time since last sample", "Seconds since each job's newest execution sample.",
              (q(f"time() - xmon_job_ledger_last_sample_timestamp_seconds{{{H}}}", JOB),),
              unit="s", width=8),
    ))  # fmt: skip


BOARD = Board(
    uid="xmon-health",
    title="xmon / Health",
    description="xmon itself: daemons, scrape time, collectors, agents and dropped reports, "
    "and the execution ledger's samples.",
    variables=(Variable("instance", "Host", "label_values(xmon_up, instance)"),),
    rows=(_daemons(), _collectors(), _agents(), _ledger()),
)
