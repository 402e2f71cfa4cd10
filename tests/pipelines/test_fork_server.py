"""pipelines/runners/fork_server.py: a worker forked from the warm server runs with its client's arguments,
environment and standard streams, and its client ends as the worker does (exit code, or SIGKILL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Run in a process of its own: the server forks only from a process with no other thread (pytest has some).
LAUNCHER = r"""
import json, os, subprocess, sys
from bertstream.pipelines.runners import fork_server

WARMED = []

def warm():
    WARMED.append(os.getpid())

def target():  # stands for Beam's worker: says where it runs and what it got, then ends as told
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "warmed": WARMED, "argv": sys.argv,
                      "tag": os.environ.get("TAG")}), flush=True)
    if os.environ.get("EXIT"):
        sys.exit(int(os.environ["EXIT"]))
    if os.environ.get("KILL"):
        os.kill(os.getpid(), 9)

server = fork_server.start(3, warm, target)
client = ("import sys; from bertstream.pipelines.runners import fork_server as f; "
          "c = f.run_through_server(sys.argv[1], ['worker', 'arg']); print(json.dumps({'fallback': c is None})) "
          "if c is None else sys.exit(c)").replace("print(json", "import json; print(json")
runs = []
for env in ({"TAG": "a"}, {"EXIT": "3"}, {"KILL": "1"}, {}):  # the 4th: the server has forked its 3 and left
    r = subprocess.run([sys.executable, "-c", client, server[0]], env={**os.environ, **env},
                       capture_output=True, text=True, timeout=60)
    runs.append({"rc": r.returncode, "out": r.stdout})
fork_server.stop(server)
def fail():
    raise RuntimeError("warm-up failed")
broken = fork_server.start(1, fail, target)  # its client runs the worker itself
r = subprocess.run([sys.executable, "-c", client, broken[0]], capture_output=True, text=True, timeout=60)
runs.append({"rc": r.returncode, "out": r.stdout})
fork_server.stop(broken)
print(json.dumps({"server": server[1], "runs": runs}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux only")
def test_a_forked_worker_runs_as_its_client_and_its_client_ends_as_it_does():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", LAUNCHER], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.splitlines()[-1])
    server, (plain, exits, killed, late, broken) = result["server"], result["runs"]
    worker = json.loads(plain["out"])
    # Forked from the server, after its warm-up (its parent is the server until the server, done, leaves: not
    # compared); the client's arguments, environment and stdout.
    assert worker["warmed"] == [server] and worker["pid"] != server
    assert worker["argv"] == ["worker", "arg"] and worker["tag"] == "a" and plain["rc"] == 0
    assert exits["rc"] == 3 and json.loads(exits["out"])["warmed"] == [server]
    assert killed["rc"] == -9 and json.loads(killed["out"])["warmed"] == [server]  # died by a signal: SIGKILL
    assert late["rc"] == 0 and json.loads(late["out"]) == {"fallback": True}  # no server: the client runs it
    assert broken["rc"] == 0 and json.loads(broken["out"]) == {"fallback": True}  # a server that failed: the same
