"""A newcomer's first hour, as the README writes it: ``xmon demo``, then in another shell
``xmon top`` (in tmux, its capture key), ``xmon capture``, ``xmon programs``, ``xmon ls``,
``xmon monitor``, and xprof serving the captured trace; the demo stopped with SIGTERM at the
end, and none of its processes left.

The venv: the README's ``python3 -m venv .venv && .venv/bin/pip install -e .`` downloads every
dependency, which takes minutes and a network. Here a temporary venv is made with the project's
interpreter (without pip of its own), the project's venv's site-packages are added to it with a
``.pth`` file, and its ``python -m pip install -e . --no-deps --no-build-isolation`` installs xmon
into it, so every command runs as the README writes it (``<venv>/bin/xmon``; ``xprof`` from
the venv holding the dependencies).
"""

from __future__ import annotations

import json
import re
import signal
import site
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from support.process_tree import assert_all_gone, descendants
from support.procs import REPO, base_env, free_port, wait_for
from support.profiling_procs import get_json
from support.tmux import Tmux, shows


def make_venv(path: Path) -> Path:
    """``path``/bin with xmon installed editable and the project's dependencies reachable."""
    # Without pip of its own: the project's pip and setuptools (through the .pth) build it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   timeout=300)  # fmt: skip
    [packages] = [Path(p) for p in site.getsitepackages() if p.endswith("site-packages")]
    [target] = list((path / "lib").glob("python3*/site-packages"))
    (target / "xmon-walkthrough-deps.pth").write_text(f"{packages}\n")
    subprocess.run([str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "-e", str(REPO)],
                   check=True, timeout=600, cwd=REPO)  # fmt: skip
    return path / "bin"


def test_a_newcomers_first_hour(tmp_path: Path) -> None:
    bin_dir = make_venv(tmp_path / "venv")
    env = base_env(XDG_RUNTIME_DIR=str(tmp_path / "run"), XDG_STATE_HOME=str(tmp_path / "st"))
    env.pop("PYTHONPATH", None)  # the venv's own xmon, as installed
    port = free_port()
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        command = [str(bin_dir / "xmon"), "demo", "--listen", f"127.0.0.1:{port}"]
        demo = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    tmux = Tmux(tmp_path / "tmux.sock")
    children: list[psutil.Process] = []
    try:
        children = _wait_until_it_learns(demo, port, log)
        _views(bin_dir, env)
        capture = _capture(bin_dir, env)
        trace = Path(re.findall(r"^  (/\S+\.xplane\.pb)$", capture, re.MULTILINE)[0])
        _top(tmux, bin_dir, env)
        _xprof_serves(bin_dir, trace, tmp_path)
    finally:
        tmux.close()
        if demo.poll() is None:
            children = children or descendants(demo.pid)
            demo.send_signal(signal.SIGTERM)
            demo.wait(60)
        assert_all_gone(children)
    assert "Traceback" not in log.read_text()


def _wait_until_it_learns(demo: subprocess.Popen[bytes], port: int, log: Path) -> list:
    def stepping() -> bool:
        assert demo.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return False
        return bool(re.search(r"^xmon_job_steps_per_second\{.*\} [1-9]", text, re.MULTILINE))

    wait_for(stepping, 240, "the demo's job to step")
    return descendants(demo.pid)


def _run(bin_dir: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run([str(bin_dir / "xmon"), *args], env=env, capture_output=True,
                            text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def _capture(bin_dir: Path, env: dict[str, str]) -> str:
    """As a user does when told the job is busy (the demo's slow first steps trigger captures
    of their own): try again when it ends."""
    command = [str(bin_dir / "xmon"), "capture", "--job", "demo", "--duration", "1s"]

    def done() -> str | None:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0 or "busy" in result.stderr, result.stderr
        return result.stdout if result.returncode == 0 else None

    return str(wait_for(done, 120, "a capture the job is free for"))


def _views(bin_dir: Path, env: dict[str, str]) -> None:
    assert "demo" in _run(bin_dir, env, "ls")
    assert '"job_name":"demo"' in _run(bin_dir, env, "monitor", "--once")
    programs = _run(bin_dir, env, "programs", "--job", "demo")
    assert "FINGERPRINT" in programs and re.search(r"^demo +\d+ ", programs, re.MULTILINE)


def _top(tmux: Tmux, bin_dir: Path, env: dict[str, str]) -> None:
    tmux.start(f"{bin_dir / 'xmon'} top", env)
    wait_for(lambda: shows(tmux, r"demo"), 120, "top to show the demo job")
    tmux.keys("t")
    wait_for(lambda: shows(tmux, r"trace of pid \d+ captured"), 180, "top's capture")


def _xprof_serves(bin_dir: Path, trace: Path, tmp_path: Path) -> None:
    logdir = trace.parents[4]
    port = free_port()
    with open(tmp_path / "xprof.log", "wb") as out:
        # xprof's entry point lives where the dependencies were installed: the project's venv.
        command = [
            str(Path(sys.executable).parent / "xprof"),
            "server",
            "--logdir",
            str(logdir),
            "--port",
            str(port),
        ]
        xprof = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/data/plugin/profile/runs"

        def lists_the_run() -> bool:
            assert xprof.poll() is None, (tmp_path / "xprof.log").read_text()
            try:
                return trace.parents[3].name in json.dumps(get_json(url, timeout=5))
            except OSError:
                time.sleep(0.5)
                return False

        wait_for(lists_the_run, 120, "xprof to list the captured run")
    finally:
        xprof.terminate()
        xprof.wait(30)
