"""Secrets in a job's command line are not the daemon's business.

The agent sends its argv to the daemon (the views show it); a job started with
``--api-token=SECRET`` would otherwise hand the secret to whoever reads the daemon's views or
listens on its socket. Values of options and ``KEY=value`` words whose name mentions a token,
key, password, secret or credential are replaced, as are passwords in URLs. Set
``XMON_SEND_SECRETS=1`` to send argv as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

OPT_IN = "XMON_SEND_SECRETS"
REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"token|key|passw|secret|credential|auth", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")


def _name_is_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_argv(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``argv`` with secret values replaced (unless ``XMON_SEND_SECRETS=1``)."""
    if env.get(OPT_IN) == "1":
        return list(argv)
    out: list[str] = []
    value_is_secret = False  # the previous word was a secret option without "="
    for arg in argv:
        if value_is_secret and not arg.startswith("-"):
            out.append(REDACTED)
            value_is_secret = False
            continue
        value_is_secret = False
        name, equals, _ = arg.partition("=")
        if equals and _name_is_secret(name):
            out.append(f"{name}={REDACTED}")
        elif arg.startswith("-") and _name_is_secret(arg):
            out.append(arg)
            value_is_secret = True
        else:
            out.append(_URL_PASSWORD.sub(rf"\g<1>{REDACTED}@", arg))
    return out
