"""The embedded emulator: moto in server mode on 127.0.0.1, one request at a time.

moto's backends check a condition and then write without a lock (`update_item` even creates a
keys-only item before applying the update), so on its threaded server two concurrent requests can
both win a conditional put, or read a half-written item. DynamoDB applies each request
atomically; handling one request at a time restores that, while clients stay concurrent. Pollers
therefore never long-poll this server (a waiting ReceiveMessage would hold every other request).
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from typing import Any

from iotsched.local.adversary import Adversary, AdversaryConfig


class EmulatorServer:
    """A started moto server. `url` is its endpoint; `stop()` ends it.

    With `adversary` set, DynamoDB requests go through an `Adversary` (`self.adversary`) that
    injects the faults DynamoDB has and moto lacks; its counts are at `GET /adversary/stats`.
    """

    def __init__(self, port: int = 0, *, adversary: AdversaryConfig | None = None) -> None:
        from moto.server import ThreadedMotoServer

        # moto's werkzeug server logs every request; the runtime's output is its own.
        logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._server.start()
        self.adversary = serialize_requests(self._server, adversary=adversary)
        host, bound = self._server.get_host_and_port()
        self.url = f"http://{host}:{bound}"

    def reset(self) -> None:
        """Drop every resource the emulator holds.

        moto keeps its state per process, shared by every server and mock in it: a runtime
        that starts after another in the same process (tests) begins from a clean slate.
        """
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            response.read()

    def stop(self) -> None:
        """Stop serving."""
        self._server.stop()


def serialize_requests(
    server: Any, *, adversary: AdversaryConfig | None = None
) -> Adversary | None:
    """Make a started `ThreadedMotoServer` handle one request at a time.

    With `adversary`, an `Adversary` stands before moto (it takes moto's lock itself, so that a
    transaction's in-flight hold runs outside it); it is returned.
    """
    wsgi = server._server  # the werkzeug server that `start()` created
    app = wsgi.app
    lock = threading.Lock()
    if adversary is not None:
        wsgi.app = Adversary(app, lock, adversary)
        return wsgi.app  # type: ignore[no-any-return]

    def one_at_a_time(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with lock:
            return list(app(environ, start_response))

    wsgi.app = one_at_a_time
    return None
