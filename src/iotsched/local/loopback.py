"""The local runtime's two ports on 127.0.0.1, the console's and the emulator's, bound at once.

`listen` binds a port before anything is started on it, so a port another program holds is a
`PortInUseError` at once (a runtime's start takes seconds, and nothing of it need start).
"""

from __future__ import annotations

import errno
import socket

#: Connections a port queues before it accepts them: many `local tick` calls, or many
#: functions' SDK clients, may connect at once, and a backlog of 5 would drop their SYNs.
BACKLOG = 128


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
