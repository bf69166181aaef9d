"""How fast ServerPoller notices a killed server and its return, and how long `specmon check` takes.

Runs the replay server of tests/serving_replay.py (real SGLang 0.5.16 answers) as a process, kills it with
SIGKILL and starts it again on the same port, ROUNDS times, with the app's poll interval (1 s).

    .venv/bin/python -m benchmarks.serving_poller_detection [--rounds 10] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from specmon.serving.poller import ServerPoller, ServerStatus

ROOT = Path(__file__).resolve().parent.parent
REPLAY = ROOT / "tests" / "support" / "serving_replay.py"



def start_replay(port: int = 0) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, str(REPLAY), "--port", str(port)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.split()[1])


class StateWatch:
    """Records when each state was first reported after `reset()`."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.seen: dict[str, float] = {}

    def __call__(self, status: ServerStatus) -> None:
        with self.cond:
            if status.state == "ready" and status.spec is None:
                return
            self.seen.setdefault(status.state, time.monotonic())
            self.cond.notify_all()

    def reset(self) -> None:
        with self.cond:
            self.seen.clear()

    def wait(self, state: str, timeout: float = 10.0) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: state in self.seen, timeout):
                raise RuntimeError(f"{state} not reported within {timeout} s")
            return self.seen[state]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()

    proc, port = start_replay()
    watch = StateWatch()
    poller = ServerPoller(f"http://127.0.0.1:{port}", watch, interval_s=args.interval, health_timeout_s=1.5)
    poller.start()
    watch.wait("ready")
    down, up = [], []
    rng = random.Random(1)
    try:
        for _ in range(args.rounds):
            time.sleep(args.interval * (1 + rng.random()))  # kill at a random point of the poll cycle
            watch.reset()
            killed = time.monotonic()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            down.append(watch.wait("unreachable") - killed)
            time.sleep(args.interval * rng.random())  # come back at a random point of the cycle
            proc, _ = start_replay(port)
            listening = time.monotonic()
            up.append(watch.wait("ready") - listening)
    finally:
        poller.stop()
        proc.kill()
        proc.wait()

    proc, port = start_replay()
    check_times = []
    for _ in range(3):
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "specmon", "check", "--url", f"http://127.0.0.1:{port}"],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
        check_times.append(time.monotonic() - started)
    proc.kill()
    proc.wait()

    def summary(values: list[float]) -> str:
        return f"median {statistics.median(values):.3f} s, max {max(values):.3f} s (n={len(values)})"

    print(f"poll interval {args.interval} s")
    print(f"killed -> 'unreachable' reported: {summary(down)}")
    print(f"listening again -> 'ready' with settings reported: {summary(up)}")
    print(f"specmon check, whole process (replay server): {summary(check_times)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
