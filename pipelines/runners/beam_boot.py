#!/usr/bin/env python3
"""The Beam Python SDK container's boot program, in Python, for worker pools that run without Docker.

On Flink, Spark or any portable runner with ``--environment_type=EXTERNAL``, each node runs a worker pool
(``python -m apache_beam.runners.worker.worker_pool_main``). In Beam's SDK container the pool is started
with ``--container_executable=/opt/apache/beam/boot``: for every SDK worker the runner asks for, the pool
runs that program, which fetches the job's provisioning (pipeline options) and staged artifacts, installs
the staged packages (``--setup_file``'s ``workflow.tar.gz``, ``--extra_package`` files) and then execs
``python -m apache_beam.runners.worker.sdk_worker_main``. Without a container executable the pool starts
a bare ``SdkHarness`` that installs nothing, gets no pipeline options and needs the job's code already on
its ``PYTHONPATH``.

This script follows the same container contract (https://s.apache.org/beam-fn-api-container-contract) with
the Python interpreter it runs under, so a pool on a machine with Beam and the job's dependencies installed
(as in a custom SDK image) gets the job's own package the way a cluster does::

    python -m apache_beam.runners.worker.worker_pool_main --service_port=50000 \\
        --container_executable="$(command -v bertprep-beam-boot)"

Differences from the Go boot, on purpose: staged packages are installed with ``pip --no-deps`` into a
folder on ``PYTHONPATH`` (the interpreter's own packages provide the dependencies, the job's package is
never installed into that interpreter); ``requirements.txt`` is refused (put dependencies in the worker's
environment); the install is done once per distinct set of staged files (a lock and a marker file under
``--semi_persist_dir``), so the workers of one pool share it and a new job with a changed package gets a
new install. Only Beam, grpc and the standard library are imported: the job's package is not there yet.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import tempfile

log = logging.getLogger("beam_boot")

WORKFLOW_FILE = "workflow.tar.gz"  # --setup_file's sdist (names as in apache_beam/runners/portability/stager.py)
EXTRA_PACKAGES_FILE = "extra_packages.txt"  # one staged --extra_package file name per line
REQUIREMENTS_FILE = "requirements.txt"
TIMEOUT_S = 120


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag in ("id", "logging_endpoint", "artifact_endpoint", "provision_endpoint", "control_endpoint"):
        p.add_argument(f"--{flag}", required=True)
    p.add_argument("--semi_persist_dir", default=os.path.join(tempfile.gettempdir(), "beam-boot"))
    return p.parse_args(argv)


def provision_info(endpoint: str, worker_id: str):
    import grpc
    from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
        return stub.GetProvisionInfo(
            beam_provision_api_pb2.GetProvisionInfoRequest(), metadata=[("worker_id", worker_id)], timeout=TIMEOUT_S
        ).info


def retrieve_artifacts(endpoint: str, worker_id: str, dependencies, folder: str) -> list[str]:
    """Write every STAGING_TO artifact under its staged name in ``folder``; return the names."""
    import grpc
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_artifact_api_pb2, beam_artifact_api_pb2_grpc, beam_runner_api_pb2

    os.makedirs(folder, exist_ok=True)
    names = []
    with grpc.insecure_channel(endpoint, options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
        stub = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(channel)
        for dep in dependencies:
            if dep.role_urn != common_urns.artifact_roles.STAGING_TO.urn:
                raise RuntimeError(f"artifact with unsupported role {dep.role_urn}")
            role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload)
            name = role.staged_name
            if os.path.basename(name) != name or name in ("", ".", ".."):
                raise RuntimeError(f"unsafe staged name {name!r}")
            with open(os.path.join(folder, name), "wb") as f:
                for chunk in stub.GetArtifact(
                    beam_artifact_api_pb2.GetArtifactRequest(artifact=dep),
                    metadata=[("worker_id", worker_id)],
                    timeout=TIMEOUT_S,
                ):
                    f.write(chunk.data)
            names.append(name)
    return sorted(names)


def packages_to_install(names: list[str], folder: str) -> list[str]:
    if REQUIREMENTS_FILE in names:
        raise RuntimeError(
            f"{REQUIREMENTS_FILE} was staged: this boot installs only the job's own packages "
            "(--setup_file, --extra_package); install dependencies in the workers' environment"
        )
    packages = []
    if EXTRA_PACKAGES_FILE in names:
        with open(os.path.join(folder, EXTRA_PACKAGES_FILE), encoding="utf-8") as f:
            packages += [os.path.join(folder, line.strip()) for line in f if line.strip()]
    if WORKFLOW_FILE in names:
        packages.append(os.path.join(folder, WORKFLOW_FILE))
    return packages


def digest(folder: str, names: list[str]) -> str:
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"\0")
        with open(os.path.join(folder, name), "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:16]


def install_once(packages: list[str], target: str) -> None:
    """``pip install --no-deps --target`` once per target, however many workers of the pool start at once."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(target + ".done"):
            return
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            target,
            *packages,
        ]
        log.info("installing staged packages: %s", " ".join(cmd))
        # The worker pool pipes our stdout and never reads it: keep pip's output off it.
        subprocess.run(cmd, check=True, stdout=sys.stderr, timeout=600)
        open(target + ".done", "w").close()


def main(argv: list[str] | None = None) -> None:
    """The ``bertprep-beam-boot`` command (the pool passes the contract's flags)."""
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="[beam_boot %(process)d] %(message)s")
    args = parse_args(argv)
    from apache_beam.portability.api import endpoints_pb2
    from google.protobuf import json_format, text_format

    info = provision_info(args.provision_endpoint, args.id)
    worker_dir = os.path.join(args.semi_persist_dir, f"worker-{args.id}")
    staged = os.path.join(worker_dir, "staged")
    names = retrieve_artifacts(args.artifact_endpoint, args.id, info.dependencies, staged)
    log.info("worker %s: staged %s", args.id, ", ".join(names) or "nothing")
    env = dict(os.environ)
    packages = packages_to_install(names, staged)
    if packages:
        target = os.path.join(args.semi_persist_dir, f"site-{digest(staged, names)}")
        install_once(packages, target)
        env["PYTHONPATH"] = os.pathsep.join([target, *filter(None, [env.get("PYTHONPATH")])])

    def descriptor(url: str) -> str:
        return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))

    env.update(
        WORKER_ID=args.id,
        PIPELINE_OPTIONS=json_format.MessageToJson(info.pipeline_options),
        SEMI_PERSISTENT_DIRECTORY=worker_dir,
        LOGGING_API_SERVICE_DESCRIPTOR=descriptor(args.logging_endpoint),
        CONTROL_API_SERVICE_DESCRIPTOR=descriptor(args.control_endpoint),
        RUNNER_CAPABILITIES=" ".join(info.runner_capabilities),
    )
    if info.HasField("status_endpoint"):
        env["STATUS_API_SERVICE_DESCRIPTOR"] = text_format.MessageToString(info.status_endpoint)
    os.dup2(2, 1)  # as above: the SDK worker's stdout goes to the pool's stderr, not to an unread pipe
    cmd = [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"]
    log.info("worker %s: exec %s", args.id, " ".join(cmd))
    os.execve(sys.executable, cmd, env)


if __name__ == "__main__":
    main()
