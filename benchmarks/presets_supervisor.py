"""How long presets take to load and list, and how long a supervised restart keeps the server away.

    .venv/bin/python -m benchmarks.presets_supervisor [--repeat N]

Measures, as medians over N runs:
- load_presets() in-process (built-in presets only);
- `specmon presets` as a process (what a user waits for);
- ServerSupervisor.stop() of a server that exits on SIGTERM, and of one that ignores it (bounded by the
  SIGTERM timeout, here 1 s);
- restart_with(): from the call until the new server listens on the port (the old one listened too).
The stand-in server is a tiny Python process that listens on --port, like the one in tests/oncall/test_supervisor.py.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specmon.launch.presets import Preset, load_presets
from specmon.launch.supervisor import ServerSupervisor
from specmon.ports import free_port, port_is_free
from specmon.preflight import launch_check

SERVER = """
import argparse, signal, socket, time
p = argparse.ArgumentParser()
p.add_argument("--port", type=int)
p.add_argument("--ignore-term", action="store_true")
a = p.parse_args()
if a.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", a.port))
s.listen()
while True:
    time.sleep(1)
"""


def wait_listening(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while port_is_free(port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {port}")
        time.sleep(0.005)


def median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f} ms (min {min(samples) * 1000:.1f}, max {max(samples) * 1000:.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    n = parser.parse_args().repeat

    load = []
    for _ in range(n):
        t = time.perf_counter()
        load_presets(user_dir=None)
        load.append(time.perf_counter() - t)
    print(f"load_presets (built-in, {len(load_presets(user_dir=None).presets)} presets): {median_ms(load)}")

    cli = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "specmon", "presets"], capture_output=True, check=True)  # noqa: S603
        cli.append(time.perf_counter() - t)
    print(f"`specmon presets` process: {median_ms(cli)}")

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "server.py"
        script.write_text(SERVER)
        for ignore in (False, True):
            stops = []
            for _ in range(max(1, n // 2 if ignore else n)):
                port = free_port()
                preset = Preset(name="bench", launcher=("{python}", str(script)),
                                args={"port": port, "ignore-term": ignore})  # fmt: skip
                sup = ServerSupervisor(preset, run_dir=Path(tmp) / "runs", preflight=launch_check)
                sup.start()
                wait_listening(port)
                t = time.perf_counter()
                report = sup.stop(timeout=1.0)
                stops.append(time.perf_counter() - t)
                assert report.leftovers == () and port_is_free(port)
            label = "ignores SIGTERM (1 s grace, then SIGKILL)" if ignore else "exits on SIGTERM"
            print(f"stop(), server {label}: {median_ms(stops)}")

        restarts = []
        port = free_port()
        preset = Preset(name="bench", launcher=("{python}", str(script)), args={"port": port})
        sup = ServerSupervisor(preset, run_dir=Path(tmp) / "runs", preflight=launch_check)
        sup.start()
        wait_listening(port)
        for _ in range(n):
            t = time.perf_counter()
            sup.restart_with(preset)
            wait_listening(port)
            restarts.append(time.perf_counter() - t)
        sup.stop()
        print(f"restart_with() until the new server listens: {median_ms(restarts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
