"""`--emulator-production-traffic RPS`: the emulator serves a steady production-like mix of its own.

Once the server is up, a thread enters requests into the scheduler as if from clients, at RPS requests a second
(wall clock, whatever `--emulator-speed` says; at most MAX_RPS), never more than MAX_RUNNING of them at once, and
none starts while another client's request is in the server (nor for PAUSE_S after): a benchmark (specmon's `b`)
then measures its own requests, not production's load beside them. Each has a rid of its own (`prod-N`) and a route label
(`custom_labels.route`, as a client's gateway tags it) and shows where a client's request does: the running counts
in /metrics, the Decode batch lines, and the request records. Request N's route, prompt and output length are
drawn from `random.Random(seed, N)`, and its acceptance draws from its prompt (speed_model.acceptance_rng), so a
run repeats. The mix (ROUTES) is a coding assistant's: mostly code (a fenced block: the code class's acceptance),
chat prose, summaries of long documents (the long class's), and two outliers a traffic view must find:
`translate` (output the draft gets nothing of: acceptance GARBLED_ACCEPT_PROB, so τ = 1.0 over 64+ tokens) and
`list` (a repetition loop: the draft is right at every depth, so most steps accept the whole chain).
"""

from __future__ import annotations

import random
import threading
import time
from typing import TYPE_CHECKING

from specmon.emulator.speed_model import count_prompt_tokens

if TYPE_CHECKING:
    from specmon.emulator.scheduler import EmulatedScheduler, GenRequest

MAX_RPS = 50.0
MAX_RUNNING = 4
"""The most production requests in the batch at once; an arrival beyond it waits for one to finish."""
RID_PREFIX = "prod-"
PAUSE_S = 3.0
"""No new production request while another client's request is in the server, nor for this long after one was
(real seconds): a benchmark's requests, one after another, run without production's load beside them."""
GARBLED_ACCEPT_PROB = 0.0
LOOP_ACCEPT_PROB = 0.98
LOOP_DEPTH_DECAY = 1.0
"""A repetition loop's draft is as right deep in the chain as at its start (the usual decay is speed_model's)."""

_PROSE = (
    "Write a short note to a colleague explaining why the harbor bridge closes early on Fridays.",
    "Describe a quiet village market in the early morning for a travel newsletter.",
    "Summarize the reasons a city library might extend its opening hours in winter.",
    "Explain to a new hire how the station's night shift hands over to the morning team.",
)
_CODE = (
    "Why does this loop never end?\n```python\nwhile i < n:\n    total += values[i]\n```",
    "Add type hints to this function:\n```python\ndef merge(a, b):\n    return {**a, **b}\n```",
    "Rewrite this query to use a join:\n```sql\nSELECT name FROM users WHERE id IN (SELECT user_id FROM orders);\n```",
)
_LONG_PARAGRAPH = ("The committee reviewed the river survey, the harbor accounts and the station's maintenance "
                   "records, and it compared each figure with the previous year's before it wrote its findings. ")
_LONG = tuple(f"Summarize report {n} below in five bullet points.\n\n" + _LONG_PARAGRAPH * 90 for n in (1, 2))
_TRANSLATE = ("Traduis ce paragraphe en japonais en gardant le ton familier: le marché ouvre tôt, la rivière est "
              "calme et les lanternes brillent encore.",)
_LIST = ("List the word 'lantern' numbered from 1 to 500, one per line.",)

ROUTES: tuple[tuple[str, float, tuple[str, ...], tuple[int, int]], ...] = (
    # (route, share of requests, prompts, output tokens low..high)
    ("code", 0.60, _CODE, (64, 256)),
    ("chat", 0.25, _PROSE, (64, 256)),
    ("summarize", 0.09, _LONG, (64, 192)),
    ("translate", 0.03, _TRANSLATE, (64, 160)),
    ("list", 0.03, _LIST, (128, 256)),
)


def production_request(scheduler: EmulatedScheduler, seed: int, index: int) -> GenRequest:
    """Production request number `index`: its route, prompt and length drawn from (seed, index)."""
    rng = random.Random(f"production\x1f{seed}\x1f{index}")
    pick, cumulative = rng.random(), 0.0
    route, _, prompts, (low, high) = ROUTES[-1]
    for candidate in ROUTES:
        cumulative += candidate[1]
        if pick < cumulative:
            route, _, prompts, (low, high) = candidate
            break
    prompt = prompts[rng.randrange(len(prompts))]
    sampling = {"temperature": 0.0, "max_new_tokens": rng.randint(low, high), "ignore_eos": True}
    request = scheduler.new_request(prompt, count_prompt_tokens(prompt), sampling, seed + index)
    request.rid = f"{RID_PREFIX}{index:06d}"
    request.custom_labels = {"route": route}
    if route == "translate":
        request.accept_prob = GARBLED_ACCEPT_PROB
    elif route == "list":
        request.accept_prob, request.accept_decay = LOOP_ACCEPT_PROB, LOOP_DEPTH_DECAY
    return request


class ProductionTraffic:
    """The thread that enters production requests at a steady rate once `ready` is set, until `stop`."""

    def __init__(self, scheduler: EmulatedScheduler, rps: float, seed: int, ready: threading.Event) -> None:
        self.scheduler = scheduler
        self.interval_s = 1.0 / min(MAX_RPS, rps)
        self.seed = seed
        self.ready = ready
        self._stopped = threading.Event()
        self._in_flight: list[GenRequest] = []

    def start(self) -> None:
        threading.Thread(target=self._run, name="emulator-production", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self.ready.wait(0.2):
            if self._stopped.is_set():
                return
        index, next_at, outside_seen_at = 0, time.monotonic(), -PAUSE_S
        while not self._stopped.is_set():
            self._in_flight = [r for r in self._in_flight if not r.finished]
            if any(not rid.startswith(RID_PREFIX) for rid in self.scheduler.rids_in_flight()):
                outside_seen_at = time.monotonic()
            if time.monotonic() - outside_seen_at < PAUSE_S:
                next_at = time.monotonic() + 0.05
            elif len(self._in_flight) < MAX_RUNNING:
                request = production_request(self.scheduler, self.seed, index)
                self.scheduler.submit(request)
                self._in_flight.append(request)
                index += 1
                next_at = max(next_at + self.interval_s, time.monotonic() - self.interval_s)
            else:
                next_at = time.monotonic() + min(0.05, self.interval_s)
            self._stopped.wait(max(0.0, next_at - time.monotonic()))
