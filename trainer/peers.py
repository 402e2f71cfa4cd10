"""Each rank's heartbeat in the launch's rendezvous store: what names the rank that did not answer when a
collective fails, the one notice while a rank waits on a peer, and the ranks' last meeting once the process
group is gone."""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from bertstream.trainer.config import waited
from bertstream.trainer.errors import CONTINUES, RunError


class PeerLost(RunError):
    """A collective failed: a peer rank died, hung or stopped answering within ``--dist-timeout``."""


HEARTBEAT_S = 1.0


class _Peers:
    """Each rank's heartbeat and step, published in the launch's rendezvous store by a thread of its own (over a
    connection of its own): what names the rank that did not answer when a collective fails, and what the one
    notice while waiting on a peer says. A rank blocked in a collective still beats; a dead or stopped one
    does not; a live one that does not come is at another step."""

    def __init__(self) -> None:
        self.step = -1
        self.store: Any = None
        self.running = threading.Event()

    def start(self, rank: int, world_size: int, timeout_s: float) -> None:
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.prefix = f"bertstream/peers/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        try:
            self.store = dist.TCPStore(
                os.environ["MASTER_ADDR"],
                int(os.environ["MASTER_PORT"]),
                is_master=False,
                timeout=timedelta(seconds=10),
                wait_for_workers=False,
            )
        except (RuntimeError, ValueError):  # no store to reach: failures then name no rank
            self.store = None
            return
        self.running.set()
        threading.Thread(target=self._beat, name="peer-heartbeat", daemon=True).start()

    def stop(self) -> None:
        self.running.clear()

    def meet(self, name: str, world: int, seconds: float) -> None:
        """Wait (at most ``seconds``) until all ``world`` ranks have called ``meet(name)``: a meeting through the
        rendezvous store, for when the process group is gone. Without a store, or once it is gone, no wait."""
        if self.store is None:
            return
        key = f"{self.prefix}/{name}"
        deadline = time.monotonic() + seconds
        try:
            self.store.add(key, 1)
            while self.store.add(key, 0) < world and time.monotonic() < deadline:
                time.sleep(0.01)
        except Exception:  # noqa: BLE001 - the store's host (rank 0's launcher) is gone: nobody left to wait for
            return

    def _beat(self) -> None:
        beat, still_since, said = 0, time.monotonic(), False
        last_step = self.step
        notice_after = min(60.0, self.timeout_s / 4)
        heard: dict[int, tuple[int, float]] = {}  # rank -> (its last beat, when it changed)
        while self.running.is_set():
            beat += 1
            now = time.monotonic()
            if self.step != last_step:
                last_step, still_since, heard = self.step, now, {}
            # Peers are read only once this rank has stood still a while (W ranks reading W beats every second
            # would load the rendezvous store of a large cluster with W*W reads a second).
            watching = not said and self.step >= 0 and now - still_since > notice_after / 2
            try:
                self.store.set(f"{self.prefix}/{self.rank}", f"{beat} {self.step}")
                seen = self._read() if watching else {}
            except Exception:  # noqa: BLE001 - the store's host is gone: the collective's own failure reports it
                return
            for r, (b, _) in seen.items():
                if heard.get(r, (None, 0.0))[0] != b:
                    heard[r] = (b, now)
            watched = bool(heard) and now - min(since for _, since in heard.values()) > 3 * HEARTBEAT_S
            if watching and watched and now - still_since > notice_after:  # silence first: a step can be stale
                quiet = [r for r, (_, since) in heard.items() if r != self.rank and now - since > 3 * HEARTBEAT_S]
                waiting = ", ".join(f"rank {r} (silent for {now - heard[r][1]:.0f} s)" for r in quiet)
                waiting = waiting or self._behind(seen)
                if waiting:
                    said = True
                    print(
                        f"[berttrain] rank {self.rank} is waiting for {waiting} at step {self.step}; the run "
                        f"ends after {waited(self.timeout_s)} without an answer",
                        file=sys.stderr,
                        flush=True,
                    )
            time.sleep(HEARTBEAT_S)

    def _read(self) -> dict[int, tuple[int, int]]:
        out = {}
        for r in range(self.world_size):
            try:
                beat, step = self.store.get(f"{self.prefix}/{r}").decode().split()
                out[r] = (int(beat), int(step))
            except Exception:  # noqa: BLE001 - no beat yet from it
                out[r] = (-1, -1)
        return out

    def _behind(self, seen: dict[int, tuple[int, int]]) -> str:
        late = [r for r, (_, step) in seen.items() if r != self.rank and step < self.step]
        return ", ".join(f"rank {r} (at step {seen[r][1]})" for r in late)

    def silent(self) -> str:
        """The ranks that did not answer, as a phrase: those whose heartbeat stopped, else those at an
        earlier step; rank 0's host when the store it serves is gone."""
        if self.store is None:
            return "a peer rank"
        try:
            first = self._read()
            time.sleep(3 * HEARTBEAT_S)
            then = self._read()
        except Exception:  # noqa: BLE001
            return "rank 0 (its host, which serves the rendezvous, is gone)"
        mine = self.rank
        stopped = [r for r in then if r != mine and then[r][0] == first[r][0]]
        if stopped:
            return ", ".join(f"rank {r}" for r in stopped)
        return self._behind(then) or "a peer rank"


PEERS = _Peers()


def at_step(step: int) -> None:
    """This rank's step, for its heartbeat (see :class:`_Peers`)."""
    PEERS.step = step


def peer_lost(e: BaseException, timeout_s: float) -> PeerLost | None:
    """The one-line error for a collective that failed because of a peer (None: ``e`` is something else)."""
    if not dist.is_initialized() or not isinstance(e, (RuntimeError, dist.DistError)):
        return None
    text = str(e)
    words = ("Timed out", "timed out", "Connection closed by peer", "Connection reset", "Broken pipe", "gloo", "NCCL")
    if not isinstance(e, dist.DistError) and not any(w in text for w in words):
        return None
    who = PEERS.silent()
    return PeerLost(
        f"{who} did not answer within {waited(timeout_s)} (it died, hung or was stopped; its own log "
        f"says why): the run ends here, and {CONTINUES} from the last complete checkpoint"
    )
