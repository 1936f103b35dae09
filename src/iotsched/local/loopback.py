"""The local runtime's two ports on 127.0.0.1, the console's and the emulator's: bound at once,
and kept to their own callers.

`listen` binds a port before anything is started on it, so a port another program holds is a
`PortInUseError` at once (a runtime's start takes seconds, and nothing of it need start).

The callers are this machine's programs (the CLI, the SDKs, the functions) and the console's
own page. Both ports listen on 127.0.0.1 only, yet a browser on the machine reaches them from
any page it shows, and a page may send (not read) a form's or a `no-cors` fetch's request to
any address.
`LoopbackGuard` stands before a port's app and refuses, with a JSON answer that says why:

- a `Host` that is not the port's own (`127.0.0.1:PORT` or `localhost:PORT`): 421. It is DNS
  rebinding: a name the page's site controls now resolves to 127.0.0.1, so the browser takes
  the port's answers for the page's own origin and lets it read them;
- an `Origin` that is not the port's own: 403. A browser names the page that sent a request;
  programs send no `Origin`;
- on the console's port, a request that changes state (any method but GET, HEAD and OPTIONS)
  without `Content-Type: application/json`, even one with no body: 415. A page of another
  origin can send JSON only after a CORS preflight, which the port never grants, so this holds
  where a browser leaves `Origin` out;
- on the emulator's port, a request a browser says another site made (`Sec-Fetch-Site`), as an
  image or a link does with no `Origin`: 403. The SDKs speak form-encoded protocols (SNS, SQS's
  query API), so the content type tells nothing there; and no answer of the emulator carries
  moto's `Access-Control-Allow-*` headers, which allow every origin.
"""

from __future__ import annotations

import errno
import json
import socket
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.wrappers import Request, Response

StartResponse = Callable[..., Any]
Wsgi = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

#: Connections a port queues before it accepts them: many `local tick` calls, or many
#: functions' SDK clients, may connect at once, and a backlog of 5 would drop their SYNs.
BACKLOG = 128
#: Methods that only read: everything else changes state.
READS = frozenset({"GET", "HEAD", "OPTIONS"})
#: `Sec-Fetch-Site` values of requests that no page of another site made ("none": typed in the
#: address bar or opened from a bookmark).
OWN_SITE = frozenset({"same-origin", "none"})


class PortInUseError(OSError):
    """A port on 127.0.0.1 is served by another program."""


def listen(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port` (0: a free one), bound now.

    Raises PortInUseError when another program holds the port. Address reuse is on, as
    werkzeug's servers set it: a port a stopped runtime left in TIME_WAIT is free.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(
                exc.errno, f"port {port} on 127.0.0.1 is in use by another program"
            ) from None
        raise
    return sock


class LoopbackGuard:
    """WSGI middleware: the port's app, answering only its own callers (see the module).

    Args:
        app: the port's application.
        port: the port it serves on 127.0.0.1.
        json_writes: requests that change state must say `Content-Type: application/json`
            (the console's port; its API and control speak JSON only).
        emulator: refuse what a browser says another site sent, and drop moto's CORS headers.
    """

    def __init__(self, app: Wsgi, port: int, *, json_writes: bool, emulator: bool) -> None:
        self._app = app
        self._json_writes = json_writes
        self._emulator = emulator
        names = ("127.0.0.1", "localhost")
        # A browser leaves the port out of `Host` and `Origin` where it is the scheme's own.
        suffixes = [f":{port}", ""] if port == 80 else [f":{port}"]
        self._hosts = frozenset(name + suffix for name in names for suffix in suffixes)
        self._origins = frozenset(f"http://{host}" for host in self._hosts)
        self._shown = f"127.0.0.1:{port}"

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        refusal = self.refusal(Request(environ))
        if refusal is not None:
            return refusal(environ, start_response)
        if not self._emulator:
            return self._app(environ, start_response)

        def without_cors(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            kept = [(k, v) for k, v in headers if not k.lower().startswith("access-control-")]
            return start_response(status, kept, *rest)

        return self._app(environ, without_cors)

    def refusal(self, request: Request) -> Response | None:
        """The answer to a request this port does not serve; None for one it does."""
        host = request.headers.get("Host")
        if host is not None and host.lower() not in self._hosts:
            return _refuse(
                421,
                "wrong_host",
                f"this port serves 127.0.0.1 and localhost only, not {host!r}: a request for "
                "another name is a page whose name was made to resolve to this machine",
            )
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() not in self._origins:
            return _refuse(
                403,
                "foreign_origin",
                f"requests from pages of {origin} are refused: only this machine's programs and "
                f"pages of http://{self._shown} may call this port",
            )
        site = request.headers.get("Sec-Fetch-Site")
        if self._emulator and site is not None and site.lower() not in OWN_SITE:
            return _refuse(
                403,
                "foreign_site",
                f"a request a page of another site made (Sec-Fetch-Site: {site}) is refused: the "
                "emulator serves this machine's programs",
            )
        if self._json_writes and request.method not in READS and not request.is_json:
            said = request.headers.get("Content-Type") or "no Content-Type"
            return _refuse(
                415,
                "unsupported_media_type",
                f"{request.method} needs Content-Type: application/json, even without a body "
                f"(this one has {said}): a page of another origin cannot send that",
            )
        return None


def _refuse(status: int, error: str, message: str) -> Response:
    # The shape of the management API's errors (`ErrorBody`), which the console and the client
    # read; it says why in one line.
    body = json.dumps({"error": error, "message": message, "problems": []})
    return Response(body, status=status, mimetype="application/json")
