"""What a function keeps while its Lambda container is warm: its settings, read from the
environment once, and its wiring, built on the first invocation that needs it (its clients keep
their connections). `clear` forgets both, for a test that changes the environment.
"""

from __future__ import annotations

from iotsched.bootstrap import build
from iotsched.services.wiring import Wiring
from iotsched.settings import Settings


class Container:
    """One function's settings and wiring, each made once."""

    def __init__(self) -> None:
        self._settings: Settings | None = None
        self._wiring: Wiring | None = None

    def settings(self) -> Settings:
        """Read on first use."""
        if self._settings is None:
            self._settings = Settings.from_env()
        return self._settings

    def wiring(self) -> Wiring:
        """Built on first use, from `settings`."""
        if self._wiring is None:
            self._wiring = build(self.settings())
        return self._wiring

    def clear(self) -> None:
        """Forget what was read and built: the next use reads and builds again."""
        self._settings = None
        self._wiring = None
