"""A request's URL as it is hashed and stored (docs/design.md §3, §13, contract).

The endpoint (hashed) is the path and the sorted query, credential parameters removed; no
host, no port. Neither host nor port is hashed, so a recording made against a fake or local
server on port 8000 replays against port 9000; storing the port would still rewrite every
file on a re-record against a new port. So the stored URL of a loopback host (`localhost`,
`*.localhost`, `127.0.0.0/8`, `::1`) is `localhost` without a port; provider hosts stay as
they are, for readability. Pure: it never resolves a name.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def endpoint_of(url: str, is_secret_query: Any = None) -> str:
    """URL path plus its query sorted, with credential parameters removed; no host, no port.

    `is_secret_query(name) -> bool` decides which parameters are credentials (the redactor's).
    """
    parts = urlsplit(url)
    path = parts.path or "/"
    if not parts.query:
        return path
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if is_secret_query is not None:
        pairs = [(k, v) for k, v in pairs if not is_secret_query(k)]
    if not pairs:
        return path
    return f"{path}?{urlencode(sorted(pairs))}"


#: The host every loopback upstream is stored as.
LOOPBACK_HOST = "localhost"


@functools.lru_cache(maxsize=1024)
def is_loopback_host(host: str) -> bool:
    host = host.strip("[]").lower().rstrip(".")
    if host == LOOPBACK_HOST or host.endswith("." + LOOPBACK_HOST):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=4096)
def stored_url(url: str) -> str:
    """`url` as a recording stores it: `http://127.0.0.1:8765/v1/x` → `http://localhost/v1/x`.

    Anything that is not an absolute URL with a loopback host is returned unchanged.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return url
    if not parts.scheme or host is None or not is_loopback_host(host):
        return url
    userinfo, _, _ = parts.netloc.rpartition("@")
    netloc = f"{userinfo}@{LOOPBACK_HOST}" if userinfo else LOOPBACK_HOST
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
