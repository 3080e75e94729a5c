"""Which program an HLO request means: a fingerprint or a unique prefix of one, in one job or
in every attached job."""

from __future__ import annotations

from xmon.daemon.capture_targets import CaptureError, Code, Target, find_job
from xmon.model import Program


def find_program(
    targets: list[Target], job_name: str | None, pid: int | None, fingerprint: str
) -> tuple[Target, Program]:
    fingerprint = fingerprint.strip()
    if not fingerprint:
        raise CaptureError(Code.INVALID_ARGUMENT, "give a program fingerprint (or its prefix)")
    scope = [find_job(targets, job_name, pid)] if job_name or pid else targets
    matches: dict[str, tuple[Target, Program]] = {}
    for target in scope:
        for program in target.state.programs.values():
            if program.fingerprint.startswith(fingerprint):
                matches.setdefault(program.fingerprint, (target, program))
    exact = [m for fp, m in matches.items() if fp == fingerprint]
    if exact:
        return exact[0]
    if len(matches) == 1:
        return next(iter(matches.values()))
    where = scope[0].describe() if len(scope) == 1 else f"{len(scope)} attached jobs"
    if not matches:
        raise CaptureError(
            Code.NOT_FOUND,
            f"no program with fingerprint {fingerprint!r} in {where} (list them: xmon programs)",
        )
    names = ", ".join(f"{fp[:16]} ({m[1].name})" for fp, m in list(matches.items())[:5])
    raise CaptureError(
        Code.FAILED_PRECONDITION,
        f"{fingerprint!r} matches {len(matches)} programs in {where}: {names}; give more of it",
    )
