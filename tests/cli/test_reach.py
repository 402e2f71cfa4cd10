"""The one connection probe both command lines make (``cli.reach``): a closed port, a name that does not resolve and
a URL without a host are each one reason in words, and schemes that are not HTTP are left to their clients."""

from __future__ import annotations

import socket

import pytest

from bertstream.cli.reach import Unreachable, connect, probe_http


def test_a_listening_server_is_reached_and_a_closed_port_is_refused(closed_port):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert probe_http(f"http://127.0.0.1:{server.getsockname()[1]}/api") is True
        connect("127.0.0.1", server.getsockname()[1]).close()
    with pytest.raises(Unreachable) as e:
        probe_http(f"http://127.0.0.1:{closed_port}")
    assert e.value.refused and e.value.why == "refuses connections (nothing listens on that port)"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://:5000/", "names no host"),
        ("https://host.example:99999/", "has no valid port (Port out of range 0-65535)"),
        ("http://no-such-host.invalid:5000/", "its name does not resolve"),
    ],
)
def test_what_cannot_be_reached_says_why(url, why):
    with pytest.raises(Unreachable) as e:
        probe_http(url, seconds=5)
    assert e.value.why.startswith(why) and not e.value.refused


@pytest.mark.parametrize("url", ["file:///tmp/mlruns", "databricks", "databricks://profile", "sqlite:///m.db", ""])
def test_schemes_other_than_http_are_not_probed(url):
    assert probe_http(url) is False
