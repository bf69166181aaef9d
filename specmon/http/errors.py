"""What can go wrong with a request, as specmon's own exception classes (whatever client is underneath).

Callers catch these, never the client library's: `HttpError` is any failure; `RequestTimeout` no (whole) answer
in time; `TransportError` nothing usable came back (no connection, a broken one, broken framing); `AnswerRefused`
an answer specmon will not read (too large once decoded, an encoding it does not decode); `BadUrl` a URL
`urls.checked_url` refused; `RequestRefused` a request that was not sent (a header that would inject another).
The transport's classes keep the names specmon's messages always used, so a message that names one
(`unreachable (ConnectError)`) reads as it always did.
"""

from __future__ import annotations

from typing import Self

from specmon.urls import UrlRefused


class HttpError(Exception):
    """A request failed; the message names the request (`GET /metrics: ...`) and says why, `reason` only why."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason

    @classmethod
    def of(cls, what: str, reason: str) -> Self:
        """The error of the request `what` (`GET /metrics`), for `reason`."""
        return cls(f"{what}: {reason}", reason)


class RequestTimeout(HttpError):
    """No answer, or no whole answer, within the request's deadline."""


class TransportError(HttpError):
    """Nothing usable came back: no connection could be made, or the connection or its framing broke."""


class ConnectError(TransportError):
    """No connection could be made (refused, no route, no such host, a TLS handshake that failed)."""


class ConnectTimeout(TransportError, RequestTimeout):
    """No connection within the connect timeout."""


class ReadError(TransportError):
    """The connection broke while the answer was read."""


class RemoteProtocolError(TransportError):
    """The server broke HTTP: disconnected without an answer, a body cut short, a head that cannot be parsed."""


class AnswerTooSlow(RequestTimeout):
    """The whole answer did not arrive within its deadline (a server that drips, or holds the body back)."""


class AnswerRefused(HttpError):
    """An answer specmon will not read: over its size limit, an encoding it does not decode, or broken."""


class AnswerTooLarge(AnswerRefused):
    """An answer over its size limit once decoded (however few bytes came over the network)."""


class BadUrl(HttpError, UrlRefused):
    """A URL the client will not ask (`urls.checked_url` refused it): nothing was sent. Both an HttpError (a
    failed read where the URL came from a file or a label) and a UrlRefused (exit 2 on the command line)."""


class RequestRefused(HttpError):
    """A request that was not sent: a header with a line break or a NUL, which would begin another header."""
