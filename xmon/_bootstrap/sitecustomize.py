"""Loaded by ``xmon run`` (via PYTHONPATH): attach the xmon agent as soon as jax is imported.

Attaching waits for the job's own ``import jax`` so that a script that never uses jax pays
nothing, and never initialises a backend itself. Any sitecustomize this one shadows is loaded
afterwards, so the user's environment keeps working.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys


class _AttachAfterJaxImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname != "jax":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("jax")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):  # type: ignore[no-untyped-def]
            original_exec(module)
            try:
                import xmon

                period = float(os.environ.get("XMON_PERIOD", "1.0"))
                xmon.attach(job_name=os.environ.get("XMON_JOB_NAME") or None, period=period)
            except Exception as exc:  # noqa: BLE001 - never stop the job from starting
                print(f"xmon: agent not attached: {exc}", file=sys.stderr)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _chain_next_sitecustomize() -> None:
    """Run the sitecustomize this one shadows, if any, as Python would have."""
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("XMON_AUTOATTACH") == "1":
    if "jax" in sys.modules:
        import xmon

        xmon.attach(job_name=os.environ.get("XMON_JOB_NAME") or None)
    else:
        sys.meta_path.insert(0, _AttachAfterJaxImport())
_chain_next_sitecustomize()
