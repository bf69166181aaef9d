"""`specmon monitor` without `--url`: attach to the running server that `specmon ps` finds (asking which when
there are several), with its log from the start and, for a server specmon launched, its preset."""

from __future__ import annotations

from collections.abc import Callable

from specmon.oncall.discovery import FoundServer, NotPicked, find_servers, not_launched_note, pick_server

NAME_ONE = "specmon monitor --server {pid}"
"""How a server is named to attach to it."""


class NothingToAttach(Exception):
    """No server to attach to, or the choice could not be made; the message says why."""


def choose_server(ask: Callable[[list[FoundServer]], FoundServer | None] | None) -> FoundServer:
    """The one running server specmon launched, else the one `ask` picks among several (`pick_server`). A server
    specmon did not launch is attached to only when named (`--server PID`, or picked from `ask`'s list)."""
    inventory = find_servers(with_gpus=False)
    try:
        server = pick_server(inventory, None, "attach to", NAME_ONE, ask)
    except NotPicked as exc:
        raise NothingToAttach(str(exc)) from None
    if server is not None:
        return server
    others = sorted(inventory.alive(), key=lambda s: -(s.started_at or 0))
    if not others:
        raise NothingToAttach("no running server found (see `specmon ps`); give --url")
    picked = ask(others) if ask is not None else None
    if picked is None:
        raise NothingToAttach(f"nothing attached: no server specmon launched is running; "
                              f"{not_launched_note(inventory, NAME_ONE)}")
    return picked


def ask_on_terminal(servers: list[FoundServer]) -> FoundServer | None:
    """Numbered list on stdout, the answer from stdin."""
    for i, server in enumerate(servers, 1):
        who = server.preset or " ".join(server.argv[:3])
        print(f"  {i}. {server.id}  {who}  {server.url}  pid {server.pid}")
    try:
        answer = input(f"Attach to which server [1-{len(servers)}]? ").strip()
    except EOFError:
        return None
    if answer.isdigit() and 1 <= int(answer) <= len(servers):
        return servers[int(answer) - 1]
    return None


def find_by_key(key: str) -> FoundServer:
    server = find_servers(with_gpus=False).find(key)
    if server is None or not server.alive:
        raise NothingToAttach(f"no running server {key!r} (see `specmon ps`)")
    return server
