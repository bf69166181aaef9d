"""A fleet of emulators behind a real Prometheus on loopback, for looking at `specmon fleet` by hand, its
screenshots and its benchmark: EAGLE3 servers launched as specmon's demo-eagle3-5 and demo-eagle3-10 presets and a
plain one under load, one killed, a DP2×TP2 one, a two-node one, the recorded DP2×TP2 capture, and two DCGM
exporter stand-ins replaying NVML readings recorded on an H200 (host gpu-a under load, gpu-b idle; the second
names its host `hostname`, as dcgm-exporter does since #655). Every target is labelled as `specmon ps
--prometheus-sd` labels the servers specmon launched (`server`, `preset`), plus `node` for its GPU host.
Everything stops by itself after --seconds (and on Ctrl-C).

    python -m scripts.fleet_rehearsal --seconds 600 --out /tmp/fleet
    specmon fleet --prometheus URL --server-label server --host-label node     # URL: in /tmp/fleet/fleet.json
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from specmon.ports import free_port
from tests.emulator.test_emulator import launch
from tests.support.dcgm_exporter import DcgmStandIn, load_recording, newest_fixture
from tests.support.prometheus import Job, Load, Prometheus, StaticMetrics

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
SPEED = ["--emulator-speed", "50", "--emulator-decode-speed", "2", "--enable-metrics"]


def eagle3(draft: int) -> list[str]:
    return ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/eagle3-8b",
            "--speculative-num-steps", str(draft - 1), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(draft)]


SERVERS = {  # name: (preset, flags, GPU host)
    "eagle3-5": ("demo-eagle3-5", eagle3(5), "gpu-a"),
    "eagle3-10": ("demo-eagle3-10", eagle3(10), "gpu-a"),
    "plain": ("demo-baseline", [], "gpu-b"),
    "killed": ("demo-baseline", [], "gpu-b"),
    "dp2tp2": (None, [*eagle3(5), "--tp-size", "2", "--dp-size", "2", "--enable-metrics-for-all-schedulers"],
               "gpu-a"),
}
DCGM_HOSTS = {"gpu-a": ("Hostname", "load"), "gpu-b": ("hostname", "idle")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="stop everything after this long")
    parser.add_argument("--out", default="/tmp/specmon-fleet", help="where logs, the TSDB and fleet.json go")
    parser.add_argument("--scrape", default="1s", help="Prometheus' scrape interval")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    servers = {name: launch(out, *flags, *SPEED, name=f"{name}.log") for name, (_, flags, _) in SERVERS.items()}
    two_nodes = ["--tp-size", "4", "--nnodes", "2", "--dist-init-addr", f"127.0.0.1:{free_port()}"]
    for rank in (0, 1):
        servers[f"two-node/{rank}"] = launch(out, *eagle3(5), *SPEED, *two_nodes, "--node-rank", str(rank),
                                             name=f"two-node-{rank}.log")
    static = StaticMetrics((FIXTURES / "live/metrics-dp2-tp2.txt").read_text())
    recording = load_recording(newest_fixture())
    dcgm = [DcgmStandIn(("127.0.0.1", 0), recording.phase(phase), hostname=host, hostname_label=label)
            for host, (label, phase) in DCGM_HOSTS.items()]
    for stand_in in dcgm:
        stand_in.start()
    prom = load = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for server in servers.values():
            server.wait_ready(60)
        address = {name: f"127.0.0.1:{s.port}" for name, s in servers.items()}
        address["dp2tp2-capture"] = static.address
        labels = {address[name]: {"server": name, "node": host, **({"preset": preset} if preset else {})}
                  for name, (preset, _, host) in SERVERS.items()}
        for rank in (0, 1):
            labels[address[f"two-node/{rank}"]] = {"server": "two-node", "preset": "demo-eagle3-5", "node": "gpu-b"}
        labels[static.address] = {"server": "dp2tp2-capture", "node": "gpu-a"}
        prom = Prometheus(out, [Job("sglang", list(address.values()), interval=args.scrape, labels=labels),
                                Job("dcgm", [f"127.0.0.1:{s.server_address[1]}" for s in dcgm], interval=args.scrape)])
        load = Load([servers[n].url for n in ("eagle3-5", "eagle3-10", "plain", "dp2tp2", "two-node/0")], streams=3,
                    deadline_s=args.seconds)
        prom.wait_scraped('up{job="sglang"}', len(address), minimum=2)
        time.sleep(3)
        servers["killed"].proc.send_signal(signal.SIGKILL)
        (out / "fleet.json").write_text(json.dumps({"prometheus": prom.url, "servers": address,
                                                    "urls": {n: s.url for n, s in servers.items()}}))
        print(f"prometheus {prom.url}; servers {json.dumps(address)}", flush=True)
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        if load is not None:
            load.stop()
        if prom is not None:
            prom.stop()
        for server in servers.values():
            server.stop()
        static.stop()
        for stand_in in dcgm:
            stand_in.shutdown()
            stand_in.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
