"""How StartupTracker reads CUDA-graph captures: begin and end lines, batch sizes, bar-only ones.

One capture per graph (target decode, prefill, draft decode, draft extend), with the batch sizes its line lists; a
capture seen only through its progress bar (warning log level) is inferred in SGLang's order.

``CaptureReading`` is a part of ``StartupTracker`` (a mixin, a ``parts.TrackerPart``): it changes the
tracker's state through the tracker's own helpers (``_enter``, ``_rank_ok``, ``_narrow``, ``_memory``,
``_capture_event``). A capture's progress frames are read by ``bars.ProgressBars``.
"""

from __future__ import annotations

from collections.abc import Iterable

from specmon.logs import patterns
from specmon.logs.model import Capture, LineKind
from specmon.logs.parts import TrackerPart

# The graphs a progress bar without a capture line starts, in the order SGLang captures them.
INFERRED_ORDER = (("target", "target"), ("draft", "draft"), ("draft_extend", "draft"))
# The memory step named after each graph's capture.
_CAPTURE_STEP = {
    ("target", "target"): "capture",
    ("prefill", "target"): "capture_prefill",
    ("prefill", "draft"): "capture_draft_prefill",
    ("draft", "draft"): "capture_draft",
    ("draft_extend", "draft"): "capture_draft_extend",
}
_CAPTURE_PHASE = {
    ("target", "target"): "capture",
    ("prefill", "target"): "capture_prefill",
    ("prefill", "draft"): "capture_draft",
    ("draft", "draft"): "capture_draft",
    ("draft_extend", "draft"): "capture_draft_extend",
}


def add_sizes(capture: Capture, sizes: Iterable[bytes]) -> None:
    """Add batch sizes its frames show to a capture whose line listed none (as each frame does, in order)."""
    known = capture.batch_sizes
    seen = set(known)
    for size in map(int, sizes):
        if size not in seen and len(known) < 4096:
            seen.add(size)
            known.append(size)
    known.sort()


def _set_sizes(capture: Capture, sizes: list[int]) -> None:
    """The batch sizes a capture line lists; they set its total, which its progress never exceeds."""
    capture.batch_sizes = sizes
    capture.total = len(sizes) or None
    if capture.total is not None and capture.done > capture.total:
        capture.done = capture.total


class CaptureReading(TrackerPart):
    """The capture side of ``StartupTracker``, which it is a base of (see the module docstring). Its own fields
    are set by ``_init_captures``; what it uses of the tracker and of the other parts is declared by
    ``parts.TrackerPart``."""

    def _init_captures(self) -> None:
        self._capture = None
        self._bs_from_line = set()

    def _capture_line(self, tags: str, msg: str) -> LineKind | None:
        m = patterns.CAPTURE_LINE.match(msg)
        if m is None:
            lm = patterns.CAPTURE_LIST.match(msg)
            if lm is None:
                return None
            sizes = patterns.int_list(lm.group(2))
            if lm.group(1) == "bs":
                if self._state.log_family is None:
                    self._state.log_family = "legacy"
                capture = self._capture
                if capture is None or capture.graph == "prefill":
                    capture = self._capture_for("target", "target", "target decode", None)
            else:
                capture = self._capture_for("prefill", "target", "piecewise", None)
            if self._rank_ok(tags) and sizes:
                _set_sizes(capture, sizes)
                self._bs_from_line.add((capture.graph, capture.role))
                self._capture_event(capture)
            return "phase"
        self._narrow("capture_" + m.group("edge"), msg)
        what = m.group("what").strip().lower()
        graph, role, label = self._graph_of(what)
        if what.startswith(("target", "draft decode", "draft verify", "draft prefill")) or "backend=" in msg:
            self._state.log_family = "new"
        elif self._state.log_family is None:
            self._state.log_family = "legacy"
        if m.group("edge") == "begin":
            if not self._rank_ok(tags) and self._state.capture(graph, role) is not None:
                return "phase"
            self._capture_for(graph, role, label, msg)
            return "phase"
        capture = self._state.capture(graph, role)
        rank0 = not tags or patterns.is_rank_zero(tags)
        key = (graph, role)
        if capture is not None and key in self._end_seen and (key in self._final_rank0 or not rank0):
            return "phase"
        if capture is None:
            capture = self._capture_for(graph, role, label, None)
        self._end_seen.add(key)
        if rank0:
            self._final_rank0.add(key)
        self._finish_capture(capture, msg)
        return "phase"

    @staticmethod
    def _graph_of(what: str) -> tuple[str, str, str]:
        """Map the words before "cuda graph" to (JSON graph kind, role, label)."""
        role = "draft" if "draft" in what else "target"
        if "extend" in what and role == "draft":
            return "draft_extend", "draft", what or "draft extend"
        if "prefill" in what or "piecewise" in what:
            return "prefill", role, what or "prefill"
        if role == "draft":
            return "draft", "draft", what or "draft"
        return "target", "target", what or "target decode"

    def _capture_for(self, graph: str, role: str, label: str, begin_msg: str | None) -> Capture:
        """The capture of this graph, started now if new; it becomes the one progress frames feed."""
        st = self._state
        capture = st.capture(graph, role)
        if capture is None:
            capture = Capture(graph=graph, role=role, label=label, started=self._ts)
            st.captures.append(capture)
            self._enter(_CAPTURE_PHASE.get((graph, role), "capture"))
        if begin_msg is not None:
            capture.awaiting_end = True
            m = patterns.AVAIL_MEM.search(begin_msg)
            if m is not None and capture.status == "running":
                capture.avail_gb = float(m.group(1))
            lm = None if capture.batch_sizes else patterns.BS_IN_LINE.search(begin_msg)
            if lm is not None:
                _set_sizes(capture, patterns.int_list(lm.group(2)))
                self._bs_from_line.add((graph, role))
        if capture.status == "running":
            self._capture = capture
        self._capture_event(capture)
        return capture

    def _finish_capture(self, capture: Capture, end_msg: str | None) -> None:
        if end_msg is not None:
            capture.awaiting_end = False
            elapsed = patterns.ELAPSED.search(end_msg)
            usage = patterns.MEM_USAGE.search(end_msg)
            avail = patterns.AVAIL_MEM.search(end_msg)
            if elapsed is not None:
                capture.elapsed_s = float(elapsed.group(1))
            if usage is not None:
                capture.mem_usage_gb = float(usage.group(1))
            if avail is not None:
                capture.avail_gb = float(avail.group(1))
            lm = None if capture.batch_sizes else patterns.BS_IN_LINE.search(end_msg)
            if lm is not None:
                capture.batch_sizes = patterns.int_list(lm.group(2))
                capture.total = len(capture.batch_sizes) or capture.total
        was_done = capture.status == "done"
        capture.status = "done"
        if end_msg is not None or capture.ended is None or not was_done:
            capture.ended = self._ts
        if capture.elapsed_s is None and capture.started is not None and capture.ended is not None:
            capture.elapsed_s = (capture.ended - capture.started).total_seconds()
        if capture.total is not None:
            capture.done = capture.total
        capture.eta_s = 0.0
        if end_msg is not None and capture.avail_gb is not None:
            self._memory(_CAPTURE_STEP.get((capture.graph, capture.role), "capture"), capture.avail_gb)
        self._capture_event(capture)

    def _next_inferred(self) -> Capture | None:
        """A capture seen only through its progress bar (warning log level): target, draft, draft extend."""
        st = self._state
        if self._capture is not None and self._capture.status == "running":
            self._finish_capture(self._capture, None)
        for graph, role in INFERRED_ORDER:
            if st.capture(graph, role) is None:
                label = {"target": "target decode", "draft": "draft decode", "draft_extend": "draft extend"}[graph]
                return self._capture_for(graph, role, label, None)
        return None
