"""How StartupTracker follows a server's life: startup phases, ready, serving, stopped.

Entering a phase ends the one before it; a worker node serves without a ready line.

``PhaseTracking`` is a part of ``StartupTracker`` (a mixin, a ``parts.TrackerPart``): it changes the tracker's
state and emits its events through the tracker's ``_emit``.
"""

from __future__ import annotations

from copy import copy

from specmon.logs.model import LineKind, Phase, PhaseChanged, ServerBecameReady, ServerStopped, StepStatus
from specmon.logs.parts import TrackerPart


class PhaseTracking(TrackerPart):
    """The phases of ``StartupTracker``, which it is a base of (see the module docstring); what it uses of the
    tracker and of the other parts is declared by ``parts.TrackerPart``."""

    def _phase_name(self) -> str | None:
        """The phase an error without frames is blamed on: the running one, else serving once startup moved on
        (``_startup_phase``: on a worker node; the warmup before a ready line)."""
        phase = self._state.current_phase
        if phase is not None and phase.status != "running" and self._scheduler_up and not self._ready:
            return self._startup_phase("serving")
        return phase.name if phase is not None else None

    def _enter(self, name: str) -> None:
        """Begin phase ``name`` (each phase is entered once), ending the one before it."""
        st = self._state
        if st.phase(name) is not None:
            return
        previous = st.current_phase
        if previous is not None and previous.status == "running":
            self._finish_phase(previous, "done")
        phase = Phase(name=name, status="running", started=self._ts)
        st.phases.append(phase)
        self._emit(PhaseChanged(phase=copy(phase), previous=previous.name if previous else None))

    def _finish_phase(self, phase: Phase, status: StepStatus) -> None:
        phase.status = status
        phase.ended = self.clock
        if phase.started is not None and phase.ended is not None:
            phase.elapsed_s = max(0.0, (phase.ended - phase.started).total_seconds())
        self._emit(PhaseChanged(phase=copy(phase), previous=None))

    def _serving(self) -> LineKind:
        """A node that serves without printing a ready line (a worker node's health-check server is up)."""
        self._scheduler_up = True
        if not self._over and not self._ready:
            self._enter("serving")
        return "phase"

    def _maybe_warmup(self) -> None:
        if self._state.phase("http_server") is not None:
            self._enter("warmup")

    def _became_ready(self) -> LineKind:
        st = self._state
        if st.state == "failed":
            return "phase"
        self._ready = True
        st.state = "ready"
        st.ready_at = self._ts
        if self._ts is not None and st.first_ts is not None:
            st.ready_after_s = (self._ts - st.first_ts).total_seconds()
            st.ready_after_server_args_s = (self._ts - (st.launched_at or st.first_ts)).total_seconds()
        self._enter("ready")
        self._finish_phase(st.phases[-1], "done")
        self._emit(ServerBecameReady(at=st.ready_at, after_s=st.ready_after_s))
        return "phase"

    def _stopped(self, cause: str) -> None:
        st = self._state
        if st.state in ("stopped", "failed"):
            return
        self._ready = False
        self._over = True
        self._tb = None
        st.state = "stopped"
        st.stopped_at = self._ts
        st.stop_cause = cause
        self._enter("shutdown")
        self._emit(ServerStopped(at=self._ts))
