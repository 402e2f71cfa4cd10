"""A connection within a deadline: the one TCP probe both command lines make before a client waits on a server.

Clients wait long and silently on a server nobody answers for: Beam's S3 and GCS clients retry each call with
exponential backoff, gRPC to a closed ``--job_endpoint`` waits with no deadline, MLflow's HTTP client retries seven
times with backoff (minutes on a closed port). :func:`connect` opens one TCP connection, the name lookup included,
within :data:`PROBE_SECONDS`, or raises :class:`Unreachable` saying in words what happened; each command names its
flag or variable around it (``pipelines/runners/reach.py``, ``trainer/trackers.py``). A server that accepts the
connection is left to its client and its own timeouts.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

PROBE_SECONDS = 10.0
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Unreachable(OSError):
    """No connection within the deadline; ``why`` says what happened in words (``refused``: nothing listens)."""

    def __init__(self, why: str, refused: bool = False) -> None:
        super().__init__(why)
        self.why, self.refused = why, refused


def connect(host: str, port: int, seconds: float = PROBE_SECONDS) -> socket.socket:
    """A TCP connection to ``host:port`` within ``seconds``, the name lookup included (``getaddrinfo`` takes no
    timeout: it runs in a daemon thread, abandoned at the deadline), or :class:`Unreachable`."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["conn"] = socket.create_connection((host, port), timeout=seconds)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            box["error"] = e

    t = threading.Thread(target=target, name="bertstream-probe", daemon=True)
    t.start()
    t.join(seconds)
    if "conn" in box:
        return box["conn"]  # type: ignore[return-value]
    error = box.get("error")
    if error is None or isinstance(error, TimeoutError):
        raise Unreachable(f"no connection within {seconds:g} s (no network, or a firewall?)")
    if isinstance(error, ConnectionRefusedError):
        raise Unreachable("refuses connections (nothing listens on that port)", refused=True)
    if isinstance(error, socket.gaierror):
        raise Unreachable(f"its name does not resolve ({error.strerror or error}: no network, or a typo?)")
    if isinstance(error, OSError):
        raise Unreachable(f"cannot connect ({error.strerror or error})")
    raise error  # type: ignore[misc]


def probe_http(url: str, seconds: float = PROBE_SECONDS) -> bool:
    """Connect to the server of an ``http(s)://`` URL and close: True when probed, False for any other scheme (a
    file path, ``databricks``, a plugin's scheme: its client's business); :class:`Unreachable` when no server
    answers, a URL without a host or with a bad port included."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return False
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError as e:  # urlsplit's "Port out of range 0-65535" / "Port could not be cast to integer value"
        raise Unreachable(f"has no valid port ({e})") from None
    if not parts.hostname:
        raise Unreachable("names no host")
    connect(parts.hostname, port, seconds).close()
    return True
