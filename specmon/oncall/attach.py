"""`specmon monitor` without `--url`: attach to the running server that `specmon ps` finds (asking which when
there are several), with its log from the start and, for a server specmon launched, its preset."""

from __future__ import annotations

from collections.abc import Callable

from specmon.oncall.discovery import FoundServer, find_servers


class NothingToAttach(Exception):
    """No server to attach to, or the choice could not be made; the message says why."""


def choose_server(ask: Callable[[list[FoundServer]], FoundServer | None] | None) -> FoundServer:
    """The one running server (or the one specmon launched), else the one `ask` picks among several."""
    alive = find_servers(with_gpus=False).alive()
    if not alive:
        raise NothingToAttach("no running server found (see `specmon ps`); give --url")
    alive.sort(key=lambda s: (not s.launched_by_specmon, -(s.started_at or 0)))
    launched = [s for s in alive if s.launched_by_specmon]
    if len(launched) == 1:
        return launched[0]
    if len(alive) == 1:
        return alive[0]
    if ask is None:
        names = ", ".join(f"{s.id} ({s.preset or 'pid ' + str(s.pid)}, {s.url})" for s in alive)
        raise NothingToAttach(f"several servers are running: {names}; give --url or --server ID")
    picked = ask(alive)
    if picked is None:
        raise NothingToAttach("no server picked")
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
