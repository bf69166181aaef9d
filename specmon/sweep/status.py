"""The sweeps that did not finish, as `specmon ps` and attaching show them: running (its process is alive),
cancelled (Ctrl+C, the app's Cancel) or interrupted (an SSH drop, a kill), how far it got, what it would have left
serving, and how to resume it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specmon.sweep.plan import TO_DO, SweepPlan, SweepStore

MAX_SHOWN = 5
"""At most this many unfinished sweeps (the newest) are read and shown."""


@dataclass(frozen=True)
class SweepStatus:
    """One unfinished sweep."""

    run_id: str
    state: str
    """"running" (its process is alive), "cancelled" or "interrupted"."""
    done: int
    total: int
    next_preset: str | None
    leave: str
    recommended: str | None
    runner_pid: int | None

    @property
    def resume(self) -> str:
        return f"specmon sweep --resume {self.run_id}"

    @property
    def would_leave(self) -> str:
        """What the sweep would have left serving at its end."""
        if self.leave == "none":
            return "nothing (--leave none)"
        if self.leave == "baseline":
            return "its baseline (--leave baseline)"
        return f"{self.recommended} (recommended so far)" if self.recommended else "the recommended preset"

    def line(self) -> str:
        """One line; an unfinished sweep's resume command comes first, where a narrow screen does not cut it."""
        step = f"{self.done} of {self.total} steps done" + (f", next {self.next_preset}" if self.next_preset else "")
        tail = f"{step}; at its end it would leave {self.would_leave} serving"
        if self.state == "running":
            return f"sweep {self.run_id} is running (pid {self.runner_pid}): {tail}"
        return f"sweep {self.state}: {self.resume} · {tail}"

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state, "done": self.done, "total": self.total,
                "next": self.next_preset, "leave": self.leave, "would_leave": self.would_leave,
                "recommended": self.recommended, "runner_pid": self.runner_pid, "resume": self.resume}


def _running(plan: SweepPlan) -> bool:
    from specmon.oncall.state import process_matches

    return plan.runner_pid is not None and plan.runner_started is not None and process_matches(
        plan.runner_pid, plan.runner_started)


def status_of(plan: SweepPlan) -> SweepStatus:
    done = sum(1 for step in plan.steps if step.state not in TO_DO)
    upcoming = plan.next_step
    state = "running" if _running(plan) else "cancelled" if plan.cancelled else "interrupted"
    return SweepStatus(plan.run_id, state, done, len(plan.steps), upcoming.preset if upcoming else None, plan.leave,
                       plan.recommended, plan.runner_pid)


def unfinished_sweeps(store: SweepStore | None = None) -> list[SweepStatus]:
    """The newest unfinished sweeps (never raises for a bad state file: it is skipped)."""
    if store is None:
        from specmon.oncall.state import state_dir

        store = SweepStore(state_dir() / "sweeps")
    return [status_of(plan) for plan in store.unfinished(MAX_SHOWN)]
