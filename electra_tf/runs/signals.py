"""SIGINT / SIGTERM during a run: the first one asks the run to save and stop."""

from __future__ import annotations

import signal
from typing import Any, TextIO


class StopRequest:
    """Turns the first SIGINT/SIGTERM into a request to save and stop; a second one aborts.

    Inside `with StopRequest(stream) as stop:`, `stop.signum` is None until a signal came."""

    def __init__(self, stream: TextIO):
        self.signum: int | None = None
        self.stream = stream
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum
        print(
            f"\n{signal.Signals(signum).name} received: saving a checkpoint after the current "
            "step(s), then stopping (send it again to abort without saving).",
            file=self.stream,
            flush=True,
        )
        signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
