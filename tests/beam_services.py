"""Background services for runner tests: Beam's Python job service and worker pool, a Dask cluster.

Each service is a separate process group started with a bounded wait for readiness; a service that exits
or does not answer in time raises ``ServiceError`` with the tail of its log, and ``stop()`` always returns
within a bounded time (SIGINT, then SIGKILL of the whole group: the pool's SDK workers included).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from tests.processes import HANG_GUARD_S

REPO = Path(__file__).resolve().parents[1]
BOOT = REPO / "pipelines" / "runners" / "beam_boot.py"  # run as a file: it imports only Beam and the stdlib
# Hang guards, not timings (tests.processes.HANG_GUARD_S): at load 20 on 2 cores `import apache_beam` alone took
# over 60 s, and a service's start with it (issue 54).
START_TIMEOUT_S = HANG_GUARD_S
STOP_TIMEOUT_S = 10.0  # then SIGKILL
CONNECT_TIMEOUT_S = 120.0  # a Dask client's connection to a running scheduler


class ServiceError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def grpc_ready(address: str, timeout_s: float) -> bool:
    import grpc

    with grpc.insecure_channel(address) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout_s)
            return True
        except grpc.FutureTimeoutError:
            return False


class Service:
    """One background process (and its children, in its own process group), logging to ``log``."""

    def __init__(
        self, name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.name = name
        self.cmd = cmd
        self.log = log
        self._log_file = open(log, "wb")
        self._stop_lock = threading.Lock()
        self._stopped = False
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def fail(self, why: str) -> None:
        self.stop()
        raise ServiceError(f"{self.name} ({' '.join(self.cmd)}): {why}\n--- {self.log} ---\n{self.log_tail()}")

    def wait_until(self, ready, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.fail(f"exited with code {self.proc.returncode} before {what}")
            if ready():
                return
            time.sleep(0.2)
        self.fail(f"not {what} after {timeout_s:.0f} s")

    def stop(self) -> None:
        """SIGINT to the process group, then SIGKILL; bounded, idempotent, safe from two threads."""
        with self._stop_lock:
            if self._stopped:
                return
            for sig in (signal.SIGINT, signal.SIGKILL):
                if not self._group_alive():
                    break
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + STOP_TIMEOUT_S
                while time.monotonic() < deadline and self._group_alive():
                    self.proc.poll()  # reap the leader, or it stays a zombie and the group looks alive
                    time.sleep(0.1)
            self.proc.poll()
            self._log_file.close()
            self._stopped = True

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False


def worker_python(folder: Path) -> Path:
    """A Python for services that must not see this repository: a venv whose only packages are this
    interpreter's site-packages, added as a plain path (so the editable install's import hook, a ``.pth``
    file there, is not run and ``import bertstream`` fails). It stands in for a worker image that has Beam
    and the pipeline's dependencies but not bertstream, which must then arrive by staging.
    """
    import site
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    child_site = subprocess.run(
        [python, "-c", "import site; print(site.getsitepackages()[0])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    ).stdout.strip()
    # Every site-packages this interpreter imports from, in its order: site.getsitepackages() misses one that a
    # .pth file adds (scripts/tools/other_beam.py's environment layers another Beam over this one so).
    sites = [p for p in sys.path if Path(p).name == "site-packages"] or site.getsitepackages()
    Path(child_site, "parent_site_packages.pth").write_text("\n".join(sites) + "\n")
    probe = subprocess.run(
        [
            python,
            "-c",
            "import apache_beam, tokenizers\ntry:\n import bertstream.pipelines\nexcept ImportError:"
            "\n pass\nelse:\n raise SystemExit('bertstream is importable: ' + bertstream.pipelines.__file__)",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        cwd=folder,
        env=python_env(python),
    )
    if probe.returncode:
        raise ServiceError(f"worker python at {folder} is not usable:\n{probe.stderr[-3000:]}")
    return python


def python_env(python: Path | str = sys.executable, **extra: str) -> dict[str, str]:
    """The environment for a child running ``python``: its ``bin`` first on PATH (the worker pool runs
    ``python`` and the boot script by name), no PYTHONPATH, one intra-op thread, quiet tokenizers."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.update(extra)
    return env


@contextmanager
def deadline(seconds: float, services: list[Service], what: str):
    """Stop ``services`` if the body runs past ``seconds``: a job blocked on them then fails (its gRPC
    calls break) instead of hanging the test; raises ``ServiceError`` naming the timeout."""
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        for s in reversed(services):
            s.stop()

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except Exception as e:
        if expired.is_set():
            raise ServiceError(
                f"{what} did not finish in {seconds:.0f} s; services stopped:\n"
                + "\n".join(f"--- {s.log} ---\n{s.log_tail(1500)}" for s in services)
            ) from e
        raise
    finally:
        timer.cancel()
    if expired.is_set():
        raise ServiceError(f"{what} did not finish in {seconds:.0f} s; services stopped")


@contextmanager
def portable_services(tmp: Path, boot: Path = BOOT):
    """Beam's Python job service and an EXTERNAL worker pool on free loopback ports, as separate processes.

    Yields (pipeline options that send a job to them, the services). Both run under ``worker_python``, in
    ``tmp`` (cwd and TMPDIR), so they cannot import this repository: the pool starts each SDK worker through
    ``pipelines/runners/beam_boot.py``, which installs the job's staged package as the SDK container's boot does.
    """
    tmp.mkdir(parents=True, exist_ok=True)
    python = worker_python(tmp / "worker_venv")
    port_file = tmp / "job_service.port"
    pool_port = free_port()
    env = python_env(python, TMPDIR=str(tmp))
    services: list[Service] = []
    try:
        job = Service(
            "job service",
            [
                str(python),
                "-m",
                "apache_beam.runners.portability.local_job_service_main",
                "--port=0",
                f"--port_file={port_file}",
                f"--staging_dir={tmp / 'job_staging'}",
            ],
            tmp / "job_service.log",
            env,
            cwd=tmp,
        )
        services.append(job)
        pool = Service(
            "worker pool",
            [
                str(python),
                "-m",
                "apache_beam.runners.worker.worker_pool_main",
                f"--service_port={pool_port}",
                f"--container_executable={boot}",
            ],
            tmp / "worker_pool.log",
            env,
            cwd=tmp,
        )
        services.append(pool)
        job.wait_until(port_file.exists, "writing its port file")
        job_address = f"localhost:{port_file.read_text().strip()}"
        job.wait_until(lambda: grpc_ready(job_address, 1.0), f"serving at {job_address}")
        pool_address = f"localhost:{pool_port}"
        pool.wait_until(lambda: grpc_ready(pool_address, 1.0), f"serving at {pool_address}")
        yield (
            [
                "--runner=PortableRunner",
                f"--job_endpoint={job_address}",
                "--environment_type=EXTERNAL",
                f"--environment_config={pool_address}",
            ],
            services,
        )
    finally:
        for s in reversed(services):
            s.stop()


class DaskCluster:
    """A running Dask cluster of separate processes: its scheduler's address and each worker's service."""

    def __init__(self, address: str, scheduler: Service, workers: list[Service]) -> None:
        self.address = address
        self.scheduler = scheduler
        self.workers = workers

    @property
    def services(self) -> list[Service]:
        return [self.scheduler, *self.workers]

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i``'s nanny and worker process at once, as a machine that is lost."""
        try:
            os.killpg(self.workers[i].proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.workers[i].stop()

    def worker_count(self) -> int:
        from distributed import Client

        with Client(self.address, timeout=CONNECT_TIMEOUT_S) as client:
            return len(client.scheduler_info()["workers"])

    def tasks_run(self) -> dict[str, int]:
        """How many tasks each worker has run since it started."""
        from distributed import Client

        with Client(self.address, timeout=CONNECT_TIMEOUT_S) as client:
            return client.run(_executed_count)


def _executed_count(dask_worker) -> int:
    return dask_worker.state.executed_count


@contextmanager
def dask_cluster(tmp: Path, workers: int = 2, env: dict[str, str] | None = None):
    """``dask scheduler`` and ``workers`` ``dask worker --nthreads 1`` processes on loopback, each in its
    own process group, as a multi-node cluster runs them; yields a :class:`DaskCluster` once every worker
    has registered. The workers import this checkout (``PYTHONPATH``), as bertstream installed on each node."""
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    base = python_env(PYTHONPATH=str(REPO), TMPDIR=str(tmp), **(env or {}))
    dask = [sys.executable, "-m", "dask"]
    services: list[Service] = []
    try:
        scheduler = Service(
            "dask scheduler",
            [*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            tmp / "scheduler.log",
            base,
            cwd=tmp,
        )
        services.append(scheduler)
        scheduler.wait_until(lambda: _port_open(port), f"listening on {address}")
        for i in range(workers):
            services.append(
                Service(
                    f"dask worker {i}",
                    [
                        *dask,
                        "worker",
                        address,
                        "--nthreads",
                        "1",
                        "--name",
                        f"w{i}",
                        "--no-dashboard",
                        "--local-directory",
                        str(tmp / f"worker{i}"),
                    ],
                    tmp / f"worker{i}.log",
                    base,
                    cwd=tmp,
                )
            )
        cluster = DaskCluster(address, scheduler, services[1:])
        scheduler.wait_until(lambda: cluster.worker_count() == workers, f"seeing {workers} workers registered")
        yield cluster
    finally:
        for s in reversed(services):  # SIGKILL at once: a dask process given SIGINT takes seconds to leave
            try:
                os.killpg(s.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            s.stop()


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
