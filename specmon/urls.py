"""URLs and `host:port` addresses from outside, checked in one place.

Every URL specmon takes (`--url`, `--prometheus`, `--router`, a preset's host and port, a state file, a stored
result, a Prometheus label) goes through `base_url`, `address` or `url_of`, parsed by httpx as the clients
that use it parse it: http(s) only, a host, no space or control character, and no `user:password@` (refused,
never stripped in silence: a secret comes from a file, and one in a URL would show in `ps`, in specmon's output,
its JSON, its files and the textfile, and go to whatever host the URL names). A URL quoted in a message goes
through `shown`, its userinfo hidden.
"""

from __future__ import annotations

import ipaddress
import re

from specmon.inputs import InputError
from specmon.redact import HIDDEN, redacted_text
from specmon.text import quoted

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
USERINFO_REFUSED = ("holds a user:password@ (refused: a credential in a URL shows in `ps`, in specmon's output "
                    "and files, and goes wherever the URL is sent); give it in a file (--api-key-file, "
                    "--bearer-token-file, --basic-auth-file)")
_SPACE_OR_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9])?")
_ADDRESS = re.compile(r"(?P<host>\[[0-9A-Fa-f:.%a-zA-Z]+\]|[^:/\[\]@]+):(?P<port>[0-9]{1,5})")
_LEADING_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?[^/\s@?#\[\]]*@")
"""A `user:password@` at the start of an address (`alice:pw@host:1`, a label), with or without a scheme."""
MAX_URL_CHARS = 2048
SHOWN_CHARS = 120


class UrlRefused(InputError):
    """A URL or address specmon will not use; the message says why, and never holds its credentials."""


def shown(text: object) -> str:
    """A URL or address as a message may quote it: its `user:password@` and any remembered secret hidden,
    control characters escaped, cut at SHOWN_CHARS."""
    return quoted(_LEADING_USERINFO.sub(_hide_userinfo, redacted_text(text)), SHOWN_CHARS)


def _hide_userinfo(match: re.Match[str]) -> str:
    return f"{match.group('scheme') or ''}{HIDDEN}@"


def base_url(text: str, *, what: str = "the URL", scheme_required: bool = False) -> str:
    """`text` as a server's base URL: `localhost` made 127.0.0.1 (no IPv6 or resolver delay), http:// added when
    no scheme is given (unless `scheme_required`), no trailing slash. UrlRefused, naming `what`, for anything
    but an http(s) URL with a host, and for one with a `user:password@`."""
    raw = str(text).strip()
    if not raw:
        raise UrlRefused(f"{what} is empty")
    if len(raw) > MAX_URL_CHARS:
        raise UrlRefused(f"{what} {shown(raw)} is longer than {MAX_URL_CHARS} characters")
    if _SPACE_OR_CONTROL.search(raw):
        raise UrlRefused(f"{what} {shown(raw)} holds a space or a control character")
    import httpx  # here, not above: importing httpx imports rich, which `specmon presets` (host_name) must not

    if "://" not in raw:
        if scheme_required:
            raise UrlRefused(f"{what} {shown(raw)} is not an http(s) URL (give http:// or https://)")
        raw = "http://" + raw
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, ValueError) as exc:
        reason = redacted_text(str(exc))[:100]
        raise UrlRefused(f"{what} {shown(raw)} is not a URL ({reason})") from None
    if url.scheme not in SCHEMES:
        raise UrlRefused(f"{what} {shown(raw)} is not an http(s) URL")
    if url.userinfo or "@" in url.netloc.decode("ascii", "replace"):
        raise UrlRefused(f"{what} {shown(raw)} {USERINFO_REFUSED}")
    if not url.host:
        raise UrlRefused(f"{what} {shown(raw)} names no host")
    if url.port is not None and not 0 < url.port < 65536:
        raise UrlRefused(f"{what} {shown(raw)}: port {url.port} is not 1-65535")
    if url.host == "localhost":
        url = url.copy_with(host="127.0.0.1")
    return str(url).rstrip("/")


def host_name(text: str, *, what: str = "the host") -> str:
    """`text` as a host to listen on or reach: a host name, an IPv4 address or an IPv6 one (bracketed or not);
    UrlRefused for anything else (a `user:password@`, a scheme, a path, a port, a space)."""
    raw = str(text)
    if "@" in raw:
        raise UrlRefused(f"{what} {shown(raw)} {USERINFO_REFUSED}")
    if ":" in raw:
        try:
            ipaddress.IPv6Address(raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw)
        except ValueError:
            raise UrlRefused(f"{what} {shown(raw)} is neither a host name nor an IP address") from None
    elif not _HOST_NAME.fullmatch(raw):
        raise UrlRefused(f"{what} {shown(raw)} is neither a host name nor an IP address")
    return raw


def address(text: str, *, what: str = "the address") -> str:
    """`text` as a `host:port` target, as Prometheus takes one (file_sd's targets, the `instance` label): a
    host name, an IPv4 address or a bracketed IPv6 one, and a port 1-65535; nothing else (no scheme, path,
    query, `user:password@`, space or newline). UrlRefused otherwise."""
    raw = str(text)
    if "@" in raw:
        raise UrlRefused(f"{what} {shown(raw)} {USERINFO_REFUSED}")
    match = _ADDRESS.fullmatch(raw)
    if match is None:
        raise UrlRefused(f"{what} {shown(raw)} is not host:port")
    host, port = match.group("host"), int(match.group("port"))
    if not 0 < port < 65536:
        raise UrlRefused(f"{what} {shown(raw)}: port {port} is not 1-65535")
    try:
        host_name(host, what=what)
    except UrlRefused:
        raise UrlRefused(f"{what} {shown(raw)} is not host:port (not a host name or IP address)") from None
    return raw


def address_of(url: str, *, what: str = "the URL") -> str:
    """The `host:port` a base URL names (the scheme's port when it names none): what Prometheus calls its
    target and `instance`. UrlRefused as `base_url`, or when the URL holds more than a scheme, host and port."""
    import httpx

    checked = httpx.URL(base_url(url, what=what))
    if checked.path not in ("", "/") or checked.query or checked.fragment:
        raise UrlRefused(f"{what} {shown(url)} holds more than a host and port (a path, a query)")
    port = checked.port or DEFAULT_PORTS[checked.scheme]
    host = f"[{checked.host}]" if ":" in checked.host else checked.host
    return address(f"{host}:{port}", what=what)


def url_of(host: str, port: int, *, what: str = "the server's host") -> str:
    """The base URL of a server listening on `host` and `port` (a preset's, a state file's, a process's)."""
    host_name(host, what=what)
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return "http://" + address(f"{bracketed}:{port}", what=what)


def target_url(target: str, *, what: str = "the target") -> str:
    """The base URL of a Prometheus target (`host:port`, from a label): UrlRefused unless it is only that."""
    return "http://" + address(target, what=what)
