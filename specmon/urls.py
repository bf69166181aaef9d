"""URLs and `host:port` addresses from outside, checked in one place, and the proxy rule.

Every URL specmon takes (`--url`, `--prometheus`, `--router`, a preset's host and port, a state file, a stored
result, a Prometheus label) or builds goes through `checked_url` (a request's whole URL), `base_url` (a server's
base URL), `address` or `url_of` before anything is sent: http or https, a host name or address, a port in
1..65535 when one is given, at most `MAX_URL_CHARS`, no space, control or non-ASCII character, and no
`user:password@` (refused, never stripped in silence: a secret comes from a file, and one in a URL would show
in `ps`, in specmon's output, its JSON, its files and the textfile, and go to whatever host the URL names).
A bad one is one `UrlRefused` (an InputError: one line and exit 2 on the command line) that quotes it through
`shown`: escaped, cut, its userinfo hidden.

The proxy rule (`proxy_for`): loopback never goes through a proxy; another host goes through the environment's
proxy (`http_proxy`, `https_proxy`, `all_proxy`) only when the environment names one and `no_proxy` does not
leave that host out.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.request
from urllib.parse import SplitResult, urlsplit

from specmon.inputs import InputError
from specmon.ports import is_loopback_host
from specmon.redact import HIDDEN, redacted_text
from specmon.text import quoted

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
USERINFO_REFUSED = ("holds a user:password@ (refused: a credential in a URL shows in `ps`, in specmon's output "
                    "and files, and goes wherever the URL is sent); give it in a file (--api-key-file, "
                    "--bearer-token-file, --basic-auth-file)")
MAX_URL_CHARS = 2048
"""A URL longer than this is no server's address (a label or a file gone wrong): refused."""
SHOWN_CHARS = 120
PORT_REFUSED = "its port is not a number from 1 to 65535"

_SPACE_OR_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_ADDRESS = re.compile(r"(?P<host>\[[0-9A-Fa-f:.%a-zA-Z]+\]|[^:/\[\]@]+):(?P<port>[0-9]{1,5})")
_LEADING_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?[^/\s@?#\[\]]*@")
"""A `user:password@` at the start of an address (`alice:pw@host:1`, a label), with or without a scheme."""


class UrlRefused(InputError):
    """A URL or address specmon will not use; the message says why, and never holds its credentials."""


def shown(text: object) -> str:
    """A URL or address as a message may quote it: its `user:password@` and any remembered secret hidden,
    control characters escaped, cut at SHOWN_CHARS."""
    return quoted(_LEADING_USERINFO.sub(_hide_userinfo, redacted_text(text)), SHOWN_CHARS)


def _hide_userinfo(match: re.Match[str]) -> str:
    return f"{match.group('scheme') or ''}{HIDDEN}@"


def _refuse(url: object, what: str, why: str) -> UrlRefused:
    return UrlRefused(f"{what} {shown(url)} is not a URL specmon asks: {why}")


def _host_problem(host: str) -> str | None:
    """Why `host` (a name, an IPv4 address, or an IPv6 one without brackets) is not a host; None when it is."""
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return "its host is not an IPv6 address"
        return None
    labels = host.lower().rstrip(".").split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return "its host is not a host name or an address"
    return None


def _checked_parts(url: object, what: str) -> SplitResult:
    if not isinstance(url, str):
        raise UrlRefused(f"{what} is not text")
    if len(url) > MAX_URL_CHARS:
        raise _refuse(url, what, f"longer than {MAX_URL_CHARS} characters ({len(url):,})")
    if (unsafe := _SPACE_OR_CONTROL.search(url)) is not None:
        kind = "a space" if unsafe.group() == " " else "a control character"
        raise _refuse(url, what, f"it holds {kind} (character {unsafe.start() + 1})")
    if not url.isascii():
        raise _refuse(url, what, "it holds a non-ASCII character")
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed [
        raise _refuse(url, what, "its host is not an IPv6 address") from None
    if parts.scheme.lower() not in SCHEMES:
        raise _refuse(url, what, "only http:// and https:// are asked")
    if "@" in parts.netloc:
        raise UrlRefused(f"{what} {shown(url)} {USERINFO_REFUSED}")
    host = parts.hostname or ""
    if not host:
        raise _refuse(url, what, "it names no host")
    if (problem := _host_problem(host)) is not None:
        raise _refuse(url, what, problem)
    try:
        port = parts.port
    except ValueError:
        raise _refuse(url, what, PORT_REFUSED) from None
    if port == 0:
        raise _refuse(url, what, PORT_REFUSED)
    return parts


def checked_url(url: str, what: str = "the URL") -> str:
    """`url` itself (a request's whole URL, a query allowed), once checked (see the module doc); UrlRefused
    when specmon will not ask it."""
    _checked_parts(url, what)
    return url


def base_url(text: str, *, what: str = "the URL", scheme_required: bool = False) -> str:
    """`text` as a server's base URL, checked (`checked_url`): `localhost` made 127.0.0.1 (no IPv6 or resolver
    delay), http:// added when no scheme is given (unless `scheme_required`), the scheme and host lower-case, no
    trailing slash, and no query or fragment. UrlRefused, naming `what`, otherwise."""
    raw = str(text).strip()
    if not raw:
        raise UrlRefused(f"{what} is empty")
    if "://" not in raw:
        if scheme_required:
            raise _refuse(raw, what, "give http:// or https://")
        raw = "http://" + raw
    parts = _checked_parts(raw, what)
    if parts.query or parts.fragment or raw.endswith(("?", "#")):
        raise _refuse(raw, what, "a server's URL has no query or fragment")
    host = "127.0.0.1" if parts.hostname == "localhost" else parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return f"{parts.scheme.lower()}://{netloc}{parts.path}".rstrip("/")


def host_name(text: str, *, what: str = "the host") -> str:
    """`text` as a host to listen on or reach: a host name, an IPv4 address or an IPv6 one (bracketed or not);
    UrlRefused for anything else (a `user:password@`, a scheme, a path, a port, a space)."""
    raw = str(text)
    if "@" in raw:
        raise UrlRefused(f"{what} {shown(raw)} {USERINFO_REFUSED}")
    bare = raw[1:-1] if raw.startswith("[") and raw.endswith("]") and ":" in raw else raw
    if not raw or len(raw) > MAX_URL_CHARS or _SPACE_OR_CONTROL.search(raw) or _host_problem(bare) is not None:
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
        raise UrlRefused(f"{what} {shown(raw)}: {PORT_REFUSED}")
    try:
        host_name(host, what=what)
    except UrlRefused:
        raise UrlRefused(f"{what} {shown(raw)} is not host:port (not a host name or IP address)") from None
    return raw


def address_of(url: str, *, what: str = "the URL") -> str:
    """The `host:port` a base URL names (the scheme's port when it names none): what Prometheus calls its
    target and `instance`. UrlRefused as `base_url`, or when the URL holds more than a scheme, host and port."""
    parts = urlsplit(base_url(url, what=what))
    if parts.path not in ("", "/"):
        raise UrlRefused(f"{what} {shown(url)} holds more than a host and port (a path)")
    host = parts.hostname or ""
    bracketed = f"[{host}]" if ":" in host else host
    return address(f"{bracketed}:{parts.port or DEFAULT_PORTS[parts.scheme]}", what=what)


def url_of(host: str, port: int, *, what: str = "the server's host") -> str:
    """The base URL of a server listening on `host` and `port` (a preset's, a state file's, a process's)."""
    host_name(host, what=what)
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return "http://" + address(f"{bracketed}:{port}", what=what)


def target_url(target: str, *, what: str = "the target") -> str:
    """The base URL of a Prometheus target (`host:port`, from a label): UrlRefused unless it is only that."""
    return "http://" + address(target, what=what)


def is_loopback(url: str) -> bool:
    """Whether the URL names this machine (then no proxy setting applies)."""
    return is_loopback_host(urlsplit(base_url(url)).hostname or "")


def proxy_for(url: str) -> str | None:
    """The proxy `url` is asked through, by the rule in the module doc (None: asked directly)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if is_loopback_host(host):
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme.lower()) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy
