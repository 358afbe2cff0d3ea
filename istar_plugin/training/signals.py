"""Stopping on SIGTERM or SIGINT at the next step's end with a checkpoint (exit 128 + signal); a second: at once."""
from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any, Optional

from ..errors import Stopped

SIGNALS = (signal.SIGTERM, signal.SIGINT)
DEFAULTS = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}


class StopSignal:
    """``with StopSignal() as stop:`` ... ``if stop.received: ...``: remembers the first SIGTERM or SIGINT."""

    def __init__(self, enabled: bool = True) -> None:
        self.received: Optional[int] = None
        self.enabled = enabled
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignal":
        if self.enabled and threading.current_thread() is threading.main_thread():
            for number in SIGNALS:
                if signal.getsignal(number) == DEFAULTS[number]:
                    self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _handle(self, number: int, frame: Any) -> None:
        if self.received is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(number).name}: stopping at once")
        self.received = number


def stopped(number: int, step: int, total_steps: int, epoch: int, checkpoint: Optional[Path],
            output_dir: Path) -> Stopped:
    """The error that ends a run stopped by signal ``number``; ``checkpoint`` None: an engine that saves none."""
    then = ("this engine saves no checkpoint: run the same command again to start over" if checkpoint is None
            else f"checkpoint {checkpoint.name} saved in {output_dir}: run the same command again to resume")
    return Stopped(f"stopped by {signal.Signals(number).name} after step {step} of {total_steps} (epoch {epoch + 1}); "
                   f"{then}", number)
