"""A fleet of emulators behind a real Prometheus on loopback, for looking at `specmon fleet` by hand, its
screenshots and its benchmark: EAGLE3 servers of two draft lengths and a plain one under load, one killed, the
recorded DP2×TP2 capture, and a DCGM-format target. Everything stops by itself after --seconds (and on Ctrl-C).

    python -m scripts.fleet_rehearsal --seconds 600 --out /tmp/fleet    # then: specmon fleet --prometheus URL
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from tests.support.prometheus import Job, Load, Prometheus, StaticMetrics
from tests.test_emulator import launch

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
SPEED = ["--emulator-speed", "50", "--emulator-decode-speed", "2", "--enable-metrics"]


def eagle3(draft: int) -> list[str]:
    return ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/eagle3-8b",
            "--speculative-num-steps", str(draft - 1), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(draft)]


SERVERS = {
    "eagle3-4": eagle3(4),
    "eagle3-8": eagle3(8),
    "plain": [],
    "killed": [],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="stop everything after this long")
    parser.add_argument("--out", default="/tmp/specmon-fleet", help="where logs, the TSDB and fleet.json go")
    parser.add_argument("--scrape", default="1s", help="Prometheus' scrape interval")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    servers = {name: launch(out, *flags, *SPEED, name=f"{name}.log") for name, flags in SERVERS.items()}
    static = [StaticMetrics((FIXTURES / "live/metrics-dp2-tp2.txt").read_text())]
    dcgm = StaticMetrics((FIXTURES / "fleet/dcgm-two-gpus.txt").read_text())
    prom = load = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for server in servers.values():
            server.wait_ready(60)
        address = {name: f"127.0.0.1:{s.port}" for name, s in servers.items()}
        address["dp2tp2"] = static[0].address
        labels = {address[name]: {"preset": f"demo-{name}"} for name in SERVERS}
        prom = Prometheus(out, [Job("sglang", list(address.values()), interval=args.scrape, labels=labels),
                                Job("dcgm", [dcgm.address], interval=args.scrape)])
        load = Load([servers[n].url for n in ("eagle3-4", "eagle3-8", "plain")], streams=3,
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
        for item in (*static, dcgm):
            item.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
