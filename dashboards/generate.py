"""Write xmon's Grafana dashboards and alert rules from code, so every metric name comes from
the one table in xmon.exporters.metrics_table (the tests reject names that are not in it).

    python -m dashboards.generate          # rewrite dashboards/*.json and the rules file
    python -m dashboards.generate --check  # exit 1 if the checked-in files are out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dashboards import board_device, board_fleet, board_health, board_job
from dashboards.alerts import render_rules
from dashboards.grafana import Board, render_board

HERE = Path(__file__).resolve().parent
BOARDS: tuple[Board, ...] = (board_fleet.BOARD, board_job.BOARD, board_device.BOARD,
                             board_health.BOARD)  # fmt: skip
RULES_PATH = HERE / "alerts" / "xmon.rules.yml"


def dashboard_path(board: Board) -> Path:
    return HERE / f"{board.uid}.json"


def outputs() -> dict[Path, str]:
    """Every generated file and its text."""
    files = {
        dashboard_path(board): json.dumps(render_board(board), indent=2) + "\n" for board in BOARDS
    }
    files[RULES_PATH] = render_rules()
    return files


def stale(files: dict[Path, str]) -> list[Path]:
    return [path for path, text in files.items() if not path.exists() or path.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    files = outputs()
    if args.check:
        out_of_date = stale(files)
        for path in out_of_date:
            print(f"out of date: {path} (run python -m dashboards.generate)", file=sys.stderr)
        return 1 if out_of_date else 0
    for path, text in files.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
