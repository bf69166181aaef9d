"""`python -m tests.support.peak_rss ARGS...`: specmon's command line, its peak RSS printed last on stderr as
`PEAK_RSS_MIB N` (what a test of bounded memory reads; a process killed by a signal prints nothing)."""

from __future__ import annotations

import atexit
import resource
import sys


def _report() -> None:
    print(f"PEAK_RSS_MIB {_peak_kib() / 1024:.0f}", file=sys.stderr, flush=True)


def _peak_kib() -> float:
    """This process's own peak (VmHWM). getrusage's ru_maxrss would do, but Linux carries it over an exec:
    a child of a big pytest process would report the parent's size."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_rss_mib(stderr: str) -> float | None:
    """The figure printed by a run of this module (None when it printed none)."""
    for line in reversed(stderr.splitlines()):
        if line.startswith("PEAK_RSS_MIB "):
            return float(line.split()[1])
    return None


if __name__ == "__main__":
    atexit.register(_report)
    from specmon.cli import main

    sys.exit(main(sys.argv[1:]))
