"""Stopping a training run cleanly: a signal (SIGTERM from a scheduler or from torchrun, or
Ctrl-C) only *asks* the run to stop; the trainer stops between two steps, where its state is
complete and can be saved and resumed.

Killing the process at once would lose the step it was in, or worse, the checkpoint it was
writing. Python runs a signal handler between two bytecodes of the main thread, so the
handler here only sets a flag; ``tl.train`` looks at the flag before each step.
"""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

from ._checks import check_int


class StopFlag:
    """Asks ``tl.train`` to stop before its next step.

    It is raised by ``request()``, by SIGTERM or SIGINT while ``catch_signals()`` is
    active, or once ``after`` steps are done (a run cut into slices). ``tl.train`` sets
    ``stopped`` when it ended the run early because of it (under DDP, also on the ranks
    whose own flag was not raised: the ranks agree on the step they stop at).
    """

    def __init__(self, after: int | None = None):
        if after is not None:
            check_int("after", after, minimum=0)
        self.after = after
        self.requested = False
        self.signum: int | None = None
        self.stopped = False

    def request(self, signum: int | None = None) -> None:
        """Ask for a stop (``signum``: the signal that asked, if any)."""
        self.requested = True
        if signum is not None and self.signum is None:
            self.signum = signum

    def due(self, step: int) -> bool:
        """Must the run stop now, after ``step`` steps?"""
        return self.requested or (self.after is not None and step >= self.after)

    def _handle(self, signum, frame) -> None:
        if not self.requested:
            # os.write, not print: the main thread may be inside a print to this stream.
            name = signal.Signals(signum).name
            os.write(2, f"\n{name}: stopping after this step; saving a checkpoint\n".encode())
        self.request(signum)

    @contextmanager
    def catch_signals(self, signals=(signal.SIGINT, signal.SIGTERM)):
        """While active, ``signals`` raise the flag instead of ending the process. Later
        signals change nothing (under torchrun, Ctrl-C reaches the agent, which passes it
        on: one signal per process). Only the main thread can install handlers; elsewhere
        this does nothing."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self._handle) for s in signals}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
