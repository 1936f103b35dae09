"""`iotsched local up` whose emulator port another program serves: a clear error and exit 2,
at once (the port is bound before anything else is done: moto's own starter binds in a thread
of its own and waits forever for a bind that failed)."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from iotsched.cli.main import cli
from iotsched.local.emulator import EmulatorServer
from iotsched.local.loopback import PortInUseError
from tests.support import free_port


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 another program listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


@pytest.mark.timeout(30)
def test_the_emulator_refuses_a_port_another_program_serves(taken_port: int) -> None:
    with pytest.raises(PortInUseError, match=f"port {taken_port} on 127.0.0.1 is in use"):
        EmulatorServer(taken_port)


@pytest.fixture
def own_signals() -> Iterator[None]:
    """`local up` sets SIGINT's and SIGTERM's handlers: this process gets its own back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.timeout(30)
@pytest.mark.usefixtures("own_signals")
def test_local_up_on_a_taken_emulator_port_says_so_and_exits_2(taken_port: int) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(
        cli,
        [
            "local",
            "up",
            "--manual-clock",
            "--aws-port",
            str(taken_port),
            "--port",
            str(free_port()),
        ],
    )
    assert result.exit_code == 2, result.output
    assert f"--aws-port {taken_port}: port {taken_port} on 127.0.0.1 is in use" in result.output
    assert "Traceback" not in result.output
    assert time.monotonic() - started < 20  # refused, not a wait for a server that never came
