"""The URLs specmon asks, checked in one place, and the proxy rule.

Every URL specmon takes (`--url`, `--prometheus`, `--router`, a preset's host and port, a state file, a label) or
builds goes through `checked_url` before anything is sent: http or https, a host name or address, a port in
1..65535 when one is given, at most `MAX_URL_CHARS`, no whitespace or control character. A bad one is one
`BadUrl` (an InputError: one line and exit 2 on the command line) that shows it escaped and cut.

The proxy rule: loopback never goes through a proxy; another host goes through the environment's proxy
(`http_proxy`, `https_proxy`, `all_proxy`) only when the environment names one and `no_proxy` does not leave
that host out (`proxy_for`).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.request
from urllib.parse import SplitResult, urlsplit

from specmon.http.errors import HttpError
from specmon.inputs import InputError
from specmon.ports import is_loopback_host
from specmon.text import printable

MAX_URL_CHARS = 2048
"""A URL longer than this is no server's address (a label or a file gone wrong): refused."""

_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_UNSAFE = re.compile(r"[\x00-\x20\x7f-\x9f]")


class BadUrl(HttpError, InputError):
    """A URL specmon will not ask: the message shows it (escaped, cut) and says why; nothing was sent."""


def _shown(url: str) -> str:
    text = printable(url)
    return repr(text if len(text) <= 80 else text[:60] + "…" + text[-10:])


def _refuse(url: str, what: str, why: str) -> BadUrl:
    return BadUrl(f"{what} {_shown(url)} is not a URL specmon asks: {why}")


def _check_host(url: str, parts: SplitResult, what: str) -> None:
    host = parts.hostname or ""
    if not host:
        raise _refuse(url, what, "it names no host")
    if ":" in host:  # an IPv6 address (urlsplit took it out of its brackets)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _refuse(url, what, "its host is not an IPv6 address") from None
        return
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in host.rstrip(".").split(".")):
        raise _refuse(url, what, "its host is not a host name or an address")


def checked_url(url: str, what: str = "the URL") -> str:
    """`url` itself, once checked (see the module doc); BadUrl when specmon will not ask it."""
    if not isinstance(url, str):
        raise BadUrl(f"{what} is not text")
    if len(url) > MAX_URL_CHARS:
        raise _refuse(url, what, f"longer than {MAX_URL_CHARS} characters ({len(url):,})")
    if (unsafe := _UNSAFE.search(url)) is not None:
        kind = "a space" if unsafe.group() == " " else "a control character"
        raise _refuse(url, what, f"it holds {kind} (character {unsafe.start() + 1})")
    if not url.isascii():
        raise _refuse(url, what, "it holds a non-ASCII character")
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed [
        raise _refuse(url, what, "its host is not an IPv6 address") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise _refuse(url, what, "only http:// and https:// are asked")
    _check_host(url, parts, what)
    try:
        port = parts.port
    except ValueError:
        raise _refuse(url, what, "its port is not a number from 1 to 65535") from None
    if port == 0:
        raise _refuse(url, what, "its port is not a number from 1 to 65535")
    return url


def normalize_base_url(base_url: str, what: str = "the server URL") -> str:
    """A server's base URL, checked (`checked_url`): `localhost` becomes 127.0.0.1 (no IPv6/resolver delay), a
    missing scheme becomes http, the scheme and host lower-case, no trailing /, and no query or fragment."""
    text = base_url.strip() if isinstance(base_url, str) else base_url
    if isinstance(text, str) and "://" not in text:
        text = "http://" + text
    parts = urlsplit(checked_url(text, what))
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise _refuse(base_url, what, "a server's URL has no query or fragment")
    host = "127.0.0.1" if parts.hostname == "localhost" else parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        netloc = f"{userinfo}@{netloc}"
    return f"{parts.scheme.lower()}://{netloc}{parts.path}".rstrip("/")


def is_loopback(url: str) -> bool:
    """Whether the URL names this machine (then no proxy setting applies)."""
    return is_loopback_host(urlsplit(normalize_base_url(url)).hostname or "")


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
