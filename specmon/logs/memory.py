"""How StartupTracker reads where GPU memory goes: weight loads, KV cache pools, memory steps.

Weight loads are the target's and the draft's, from their lines and their shard bars; KV cache pools are rank 0's,
the target's then the draft's; a memory step is the memory left after a step.

``MemoryReading`` is a part of ``StartupTracker`` (a mixin, a ``parts.TrackerPart``): it changes the tracker's
state through the tracker's own helpers (``_enter``, ``_finish_phase``, ``_rank_ok``, ``_narrow``,
``_weights_event``; ``_finish_capture`` for the captures the scheduler's start ends).
"""

from __future__ import annotations

from specmon.logs import patterns
from specmon.logs.model import KvPool, LineKind, MemoryStep, WeightLoad
from specmon.logs.parts import TrackerPart

_MAX_RANKS = 256


class MemoryReading(TrackerPart):
    """The memory side of ``StartupTracker``, which it is a base of (see the module docstring). Its own fields
    are set by ``_init_memory``; what it uses of the tracker and of the other parts is declared by
    ``parts.TrackerPart``."""

    def _init_memory(self) -> None:
        self._load_count = {}
        self._load_model: dict[str, str] = {}
        self._weight: WeightLoad | None = None
        self._pools_ended: set[str] = set()  # rank tags whose target pool ended: their next KV pool is the draft's
        self._kv_tags: dict[str, str] = {}  # model -> the rank tags whose KV pools are kept (rank 0's, else the first)

    # --- weights ------------------------------------------------------------------------------------------

    def _load_begin(self, tags: str, msg: str) -> LineKind:
        if len(self._load_count) < _MAX_RANKS or tags in self._load_count:
            count = self._load_count.get(tags, 0) + 1
            self._load_count[tags] = count
        else:
            count = 1
        target = self._state.weight("target")
        # the draft's when this rank loaded before, or when the target's load already ended (a log whose first
        # lines, with the target's begin, were cut off)
        model = "target" if count == 1 and (target is None or target.status != "done") else "draft"
        if tags in self._load_model or len(self._load_model) < _MAX_RANKS:
            self._load_model[tags] = model
        weight = self._state.weight(model)
        if not self._rank_ok(tags) and weight is not None:
            return "phase"
        if weight is None:
            weight = WeightLoad(model=model, started=self._ts)
            self._state.weights.append(weight)
        m = patterns.AVAIL_MEM.search(msg)
        if m is not None:
            weight.avail_gb = float(m.group(1))
        self._weight = weight
        self._enter("load_weights" if model == "target" else "load_draft_weights")
        self._weights_event(weight)
        return "phase"

    def _load_end(self, tags: str, msg: str) -> LineKind:
        if patterns.WEIGHTS_COMMITTED and msg.startswith(patterns.WEIGHTS_COMMITTED):
            return self._weights_committed(msg)
        self._narrow("load_end", msg)
        m = patterns.WEIGHT_TYPE.search(msg)
        wtype = m.group(1) if m else None
        model = self._load_model.get(tags, "target")
        if wtype and patterns.DRAFT_MODEL_TYPE.search(wtype):
            model = "draft"
        rank0 = not tags or patterns.is_rank_zero(tags)
        key = ("weights", model)
        weight = self._state.weight(model)
        if weight is not None and key in self._end_seen and (key in self._final_rank0 or not rank0):
            return "phase"
        if not self._rank_ok(tags) and weight is not None:
            return "phase"
        if weight is None:
            weight = WeightLoad(model=model)
            self._state.weights.append(weight)
            self._enter("load_weights" if model == "target" else "load_draft_weights")
        self._end_seen.add(key)
        if rank0:
            self._final_rank0.add(key)
        weight.type = wtype
        m = patterns.WEIGHT_DTYPE.search(msg)
        weight.dtype = m.group(1) if m else None
        avail = patterns.AVAIL_MEM.search(msg)
        usage = patterns.MEM_USAGE.search(msg)
        elapsed = patterns.ELAPSED.search(msg)
        weight.avail_gb = float(avail.group(1)) if avail else None
        weight.mem_usage_gb = float(usage.group(1)) if usage else None
        weight.ended = self._ts
        if elapsed is not None:
            weight.elapsed_s = float(elapsed.group(1))
        elif weight.started is not None and self._ts is not None:
            weight.elapsed_s = (self._ts - weight.started).total_seconds()
        weight.status = "done"
        if weight.shards_total is not None:
            weight.shards_done = weight.shards_total
        if weight.avail_gb is not None:
            self._memory("load_weights" if model == "target" else "load_draft_weights", weight.avail_gb)
        self._weights_event(weight)
        return "phase"

    def _weights_committed(self, msg: str) -> LineKind:
        """0.5.18+'s late `Load weight end. Committed real weights after CUDA graph capture in X s`: the target's
        real weights replace the placeholders it captured with; its load's figures stay those of its end line."""
        self._narrow("load_end", msg)
        m = patterns.TIMING.search(msg.replace(" in ", " in=", 1))
        if m is not None:
            self._state.weights_committed_s = float(m.group(2))
        return "phase"

    def _weight_frame(self, n: int, total: int) -> None:
        st = self._state
        weight = self._weight
        if weight is None or (weight.status == "done" and n < (weight.shards_done or 0)):
            target = st.weight("target")
            if target is None:
                model = "target"
            elif target.status == "done" and st.weight("draft") is None:
                model = "draft"
            else:
                return
            weight = WeightLoad(model=model, started=self._ts)
            st.weights.append(weight)
            self._weight = weight
            self._enter("load_weights" if model == "target" else "load_draft_weights")
        elif weight.status == "done" and n != total:
            return
        weight.shards_done = n
        weight.shards_total = total
        now = self.clock
        if weight.status == "running" and weight.started is not None and now is not None:
            weight.elapsed_s = max(0.0, (now - weight.started).total_seconds())
        if n >= total > 0 and weight.status == "running":
            weight.status = "done"
            weight.ended = now
        self._weights_event(weight)

    # --- KV cache and memory steps ------------------------------------------------------------------------

    def _kv_rank_ok(self, model: str, tags: str) -> bool:
        """Whether to keep a KV line's pool: rank 0's, else one rank's only (a node without rank 0 prints the
        same pool once per rank). Rank 0 arriving late replaces the other rank's pools."""
        if not tags:
            return True
        kept = self._kv_tags.get(model)
        if patterns.is_rank_zero(tags):
            self._seen_rank0 = True
            if kept is not None and not patterns.is_rank_zero(kept):
                self._state.kv_pools = [p for p in self._state.kv_pools if p.model != model]
            self._kv_tags[model] = tags
            return True
        if kept is None:
            if self._seen_rank0:
                return False
            self._kv_tags[model] = tags
            return True
        return kept == tags

    def _kv_alloc(self, tags: str, msg: str) -> LineKind:
        m = patterns.KV_ALLOC.search(msg)
        if m is None:
            return "phase"
        self._narrow("kv_allocated", msg)
        st = self._state
        if m.group(1) is not None:
            st.log_family = "new"
        elif st.log_family is None:
            st.log_family = "legacy"
        draft = self._state.weight("draft") is not None and (tags in self._pools_ended or st.log_family == "legacy")
        if st.phase("kv_cache") is None and not draft:
            self._enter("kv_cache")  # the milestone counts from any rank; the figures are rank 0's
        model = "draft" if draft else "target"
        if self._kv_rank_ok(model, tags) and len(st.kv_pools) < 16:
            kv = m.group(5)
            st.kv_pools.append(
                KvPool(
                    model=model,
                    tokens=int(m.group(2)) if m.group(2) else None,  # 0.4.2's line has no token count
                    k_size_gb=float(m.group(3)) if m.group(3) else None,
                    v_size_gb=float(m.group(4)) if m.group(4) else None,
                    kv_size_gb=float(kv) if kv else None,
                    dtype=m.group(1),
                    at=self._ts,
                )
            )
        return "phase"

    def _pool_end(self, tags: str, msg: str) -> LineKind:
        st = self._state
        draft = tags in self._pools_ended and st.weight("draft") is not None
        if st.phase("kv_cache") is None and not draft:
            self._enter("kv_cache")
        if len(self._pools_ended) < _MAX_RANKS:
            self._pools_ended.add(tags)
        if not self._kv_rank_ok("draft" if draft else "target", tags):
            return "phase"
        m = patterns.AVAIL_MEM.search(msg)
        if m is not None:
            self._memory("kv_cache_draft" if draft else "kv_cache", float(m.group(1)))
        return "phase"

    def _max_total(self, tags: str, msg: str) -> LineKind | None:
        st = self._state
        total = patterns.MAX_TOTAL.match(msg)
        if total is None:
            return None
        if st.max_total_num_tokens is None:
            st.max_total_num_tokens = int(total.group(1))
            m = patterns.AVAIL_MEM.search(msg)
            if m is not None:
                self._memory("max_total_num_tokens", float(m.group(1)))
        for capture in st.captures:
            if capture.status == "running" and capture.total and capture.done >= capture.total:
                self._finish_capture(capture, None)
        self._scheduler_up = True
        current = st.current_phase
        if current is not None and current.status == "running" and not self._over:
            self._finish_phase(current, "done")
        return "phase"

    def _memory(self, step: str, avail_gb: float) -> None:
        """Record the memory left after a step (a later line for the same step, e.g. rank 0's, replaces it)."""
        memory = self._state.memory
        for i, entry in enumerate(memory):
            if entry.step == step:
                memory[i] = MemoryStep(step=step, avail_gb=avail_gb, at=self._ts)
                return
        if len(memory) < 64:
            memory.append(MemoryStep(step=step, avail_gb=avail_gb, at=self._ts))
