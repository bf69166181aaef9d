"""`specmon ps`: what specmon knows of on this host, the servers (`specmon.oncall`) and the sweeps left unfinished
(`specmon.sweep`), listed by the one command above both, so that neither imports the other."""

from __future__ import annotations

import argparse


def run_ps(args: argparse.Namespace) -> int:
    """The servers, then the sweeps a kill or a lost SSH session left unfinished (with how to resume each)."""
    from specmon.oncall.cli import run_ps as list_servers
    from specmon.sweep.status import unfinished_sweeps

    return list_servers(args, also_listed={"sweeps": unfinished_sweeps})
