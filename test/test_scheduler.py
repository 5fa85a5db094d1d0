"""Scheduler and latency model: plain Python, exact counts, no model.

The scheduler is the host half of the KV cache manager: it turns triggers into pending
requests, hands out pool slots, applies the pool-full policy and picks the decode bucket.
These tests drive it the way the engine does (trigger or demand, admit, finish) and check
every count; the property tests replay random arrival patterns and lengths and check the
invariants the device pool relies on after every frame.
"""

import dataclasses
import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxygen_core.engine.latency import MIN_STEP_S, LatencyModel, StepBudget
from oxygen_core.engine.scheduler import Admission, Scheduler
from oxygen_core.engine.types import StreamConfig

NARRATION = StreamConfig("narration", "Narrate:", max_tokens=5, trigger="every")
MEMORY = StreamConfig("memory", "Remember:", max_tokens=9, trigger="instruction_change")
ASK = StreamConfig("ask", "Answer:", max_tokens=3, trigger="on_demand")
BUCKETS = (1, 2, 4, 8)


def scheduler(capacity=8, pool_full="queue", max_queue=64, streams=(NARRATION, MEMORY, ASK)):
    return Scheduler(streams, capacity, BUCKETS, pool_full, max_queue)


def admit(sched, frame=0):
    return sched.admit(frame)


# --------------------------------------------------------------------------- CRUD


def test_admission_assigns_increasing_ids_and_lowest_free_slots():
    sched = scheduler()
    for _ in range(3):
        sched.demand("ask")
    first = admit(sched, frame=4)
    assert [(r.id, r.slot, r.stream, r.origin_frame, r.max_tokens) for r in first.admitted] == [
        (0, 0, "ask", 4, 3),
        (1, 1, "ask", 4, 3),
        (2, 2, "ask", 4, 3),
    ]
    assert sched.finish(1).slot == 1
    assert sorted(sched.active) == [0, 2]
    sched.demand("narration", max_tokens=2)
    sched.demand("memory")
    second = admit(sched, frame=5)
    # The freed slot 1 is reused first, then the next never-used slot.
    assert [(r.id, r.slot, r.max_tokens) for r in second.admitted] == [(3, 1, 2), (4, 3, 9)]
    assert {s: r.id for s, r in sched.slots.items()} == {0: 0, 1: 3, 2: 2, 3: 4}


def test_finish_of_an_unknown_request_raises_and_changes_nothing():
    sched = scheduler()
    sched.demand("ask")
    admit(sched)
    with pytest.raises(KeyError, match="7"):
        sched.finish(7)
    assert list(sched.active) == [0]


def test_demand_of_an_unknown_stream_names_the_configured_ones():
    with pytest.raises(ValueError, match=r"'chat'.*\['ask', 'memory', 'narration'\]"):
        scheduler().demand("chat")


def test_buckets_must_hold_the_whole_pool():
    with pytest.raises(ValueError, match="largest bucket 8 must hold the pool \\(9 rows\\)"):
        Scheduler((NARRATION,), 9, BUCKETS)


def test_clear_drops_active_and_queued_requests_and_the_instruction():
    sched = scheduler(capacity=1)
    sched.trigger(0, "pick")  # narration and memory; one slot
    admit(sched)
    assert (len(sched.active), len(sched.queue)) == (1, 1)
    sched.clear()
    assert (sched.active, len(sched.queue)) == ({}, 0)
    sched.trigger(1, "pick")  # same instruction, but forgotten: memory fires again
    assert [p.stream for p in sched.queue] == ["narration", "memory"]


# --------------------------------------------------------------------------- buckets


def test_bucket_is_the_smallest_holding_the_highest_occupied_slot():
    sched = scheduler()
    assert admit(sched).bucket == 0  # nothing live: no decode
    buckets = []
    for _ in range(5):
        sched.demand("ask")
        buckets.append(admit(sched).bucket)
    assert buckets == [1, 2, 4, 4, 8]
    for request_id in (0, 1, 2, 3):  # slots 0..3 free; slot 4 still occupied
        sched.finish(request_id)
    assert admit(sched).bucket == 8
    sched.finish(4)
    sched.demand("ask")
    assert [r.slot for r in admit(sched).admitted] == [0]
    assert admit(sched).bucket == 1


def test_admission_reports_bucket_admissions_and_backlog():
    sched = scheduler(capacity=2, max_queue=1)
    for _ in range(3):
        sched.demand("ask")
    first = sched.admit(0)
    assert (first.bucket, len(first.admitted), first.backlog) == (2, 2, 1)  # one waits
    sched.demand("ask")
    second = sched.admit(1)  # pool still full: one waits, one is rejected
    assert (second.bucket, len(second.admitted), second.rejected, second.backlog) == (2, 0, 1, 2)


def _admission(bucket: int, admitted: int, backlog: int) -> Admission:
    return Admission(0, (None,) * admitted, (), 0, bucket, backlog)


def test_step_budget_fixed_k_is_capped_by_the_tokens_still_needed():
    budget = StepBudget(steps_per_frame=4, min_decode_tokens=1, budget_margin_s=0.5)
    assert budget.choose(_admission(2, 0, 5), LatencyModel(), k_cap=16, time_left_s=0.0) == 4
    assert budget.choose(_admission(2, 0, 0), LatencyModel(), k_cap=3, time_left_s=0.0) == 3


def test_step_budget_auto_keeps_k_min_unless_requests_wait():
    model = LatencyModel(slack=0.0)
    model.calibrate(4, step_s=0.25, call_s=0.0)
    model.admit_s = 0.5
    budget = StepBudget(steps_per_frame="auto", min_decode_tokens=2, budget_margin_s=0.25)
    # Pool keeps up: k_min, whatever the time left.
    assert budget.choose(_admission(4, 1, 0), model, k_cap=16, time_left_s=10.0) == 2
    # Requests wait: the largest k that fits (3.25 - 0.25 margin - 0.5 admit) / 0.25 = 10.
    assert budget.choose(_admission(4, 1, 1), model, k_cap=16, time_left_s=3.25) == 10
    assert budget.choose(_admission(4, 1, 1), model, k_cap=6, time_left_s=3.25) == 6  # capped
    # No time left: k_min still holds (language never starves), capped by tokens needed.
    assert budget.choose(_admission(4, 1, 1), model, k_cap=16, time_left_s=0.0) == 2
    assert budget.choose(_admission(4, 1, 1), model, k_cap=1, time_left_s=0.0) == 1


# --------------------------------------------------------------------------- triggers


def test_every_m_frames_trigger():
    sched = scheduler(streams=(dataclasses.replace(NARRATION, every_frames=3),))
    fired = []
    for frame in range(10):
        sched.trigger(frame, "pick")
        fired.append(len(sched.queue))
        sched.queue.clear()
    assert fired == [1, 0, 0, 1, 0, 0, 1, 0, 0, 1]


def test_instruction_change_trigger_fires_on_the_first_frame_and_on_each_change():
    sched = scheduler(streams=(MEMORY,))
    fired = []
    for frame, instruction in enumerate(["pick", "pick", "place", "place", "pick"]):
        sched.trigger(frame, instruction)
        fired.append(len(sched.queue))
        sched.queue.clear()
    assert fired == [1, 0, 1, 0, 1]


def test_on_demand_streams_never_fire_from_frames():
    sched = scheduler(streams=(ASK,))
    for frame, instruction in enumerate(["a", "b", "c"]):
        sched.trigger(frame, instruction)
    assert len(sched.queue) == 0
    sched.demand("ask", max_tokens=2)
    assert [(p.stream, p.max_tokens) for p in sched.queue] == [("ask", 2)]


# --------------------------------------------------------------------------- pool full


def test_queue_policy_keeps_at_most_max_queue_and_rejects_the_rest():
    sched = scheduler(capacity=2, pool_full="queue", max_queue=1)
    for _ in range(5):
        sched.demand("ask")
    first = admit(sched)
    assert (len(first.admitted), first.rejected, len(sched.queue)) == (2, 2, 1)
    waiting = admit(sched, frame=1)  # nothing finished: the queued request waits
    assert (len(waiting.admitted), waiting.rejected, len(sched.queue)) == (0, 0, 1)
    sched.finish(0)
    later = admit(sched, frame=2)
    assert [(r.id, r.slot, r.origin_frame) for r in later.admitted] == [(2, 0, 2)]
    assert (later.rejected, len(sched.queue)) == (0, 0)


def test_skip_policy_rejects_everything_that_does_not_fit():
    sched = scheduler(capacity=2, pool_full="skip")
    for _ in range(5):
        sched.demand("ask")
    result = admit(sched)
    assert (len(result.admitted), result.rejected, len(sched.queue)) == (2, 3, 0)
    assert result.evicted == ()


def test_evict_oldest_frees_the_oldest_earlier_requests_only():
    sched = scheduler(capacity=2, pool_full="evict_oldest")
    for _ in range(2):
        sched.demand("ask")
    admit(sched)
    for _ in range(3):
        sched.demand("narration")
    result = admit(sched, frame=1)
    # Requests 0 and 1 make room; request 4 cannot evict this frame's own admissions.
    assert [(r.id, r.slot) for r in result.evicted] == [(0, 0), (1, 1)]
    assert [(r.id, r.slot, r.stream) for r in result.admitted] == [
        (2, 0, "narration"),
        (3, 1, "narration"),
    ]
    assert (result.rejected, len(sched.queue), sorted(sched.active)) == (1, 0, [2, 3])


@pytest.mark.parametrize(("pool_full", "holds"), [("queue", 3), ("skip", 2), ("evict_oldest", 2)])
def test_demand_refuses_what_a_frame_cannot_take_and_the_refusal_counts_as_rejected(
    pool_full, holds
):
    sched = scheduler(capacity=2, pool_full=pool_full, max_queue=1)
    assert [sched.demand("ask") for _ in range(holds)] == [None] * holds
    queue = holds - 2
    assert sched.demand("ask") == (
        f"{holds} requests already wait for a language phase, as many as it can take "
        f"(pool rows 2 + queue {queue})"
    )
    assert len(sched.queue) == holds  # the refused request is not hoarded
    result = admit(sched)
    assert (len(result.admitted), result.rejected, len(sched.queue)) == (2, 1, queue)
    assert result.backlog == queue + 1
    assert admit(sched, frame=1).rejected == 0  # counted once
    sched.demand("ask")
    sched.clear()  # nothing left over after a clear, refusals included
    assert (len(sched.queue), admit(sched, frame=2).rejected) == (0, 0)


def test_demands_from_many_threads_while_frames_admit_are_each_counted_once():
    """The node's callbacks demand while its worker admits: every request is admitted,
    rejected (trimmed or refused) or still queued, exactly once."""
    sched = scheduler(capacity=4, pool_full="queue", max_queue=3)
    per_thread, threads = 300, 6
    refusals: list[str | None] = []

    def ask() -> None:
        for _ in range(per_thread):
            refusals.append(sched.demand("ask"))

    workers = [threading.Thread(target=ask) for _ in range(threads)]
    for w in workers:
        w.start()
    admitted = rejected = frame = 0
    while any(w.is_alive() for w in workers) or frame < 3:
        result = admit(sched, frame)
        admitted += len(result.admitted)
        rejected += result.rejected
        frame += 1
        for r in result.admitted:
            sched.finish(r.id)
    for w in workers:
        w.join()
    last = admit(sched, frame)  # what came in after the loop's last admission
    admitted, rejected = admitted + len(last.admitted), rejected + last.rejected
    total = per_thread * threads
    assert admitted + rejected + len(sched.queue) == total == len(refusals)
    assert sum(r is not None for r in refusals) <= rejected


# --------------------------------------------------------------------------- latency


def test_latency_model_keeps_an_exponential_moving_average():
    model = LatencyModel(alpha=0.25)
    model.observe_step(4, 0.5)
    model.observe_step(4, 1.5)
    assert model.step_s == {4: 0.75}  # 0.5 + 0.25 * (1.5 - 0.5)


def test_choose_k_is_the_largest_k_that_fits_the_time_left():
    model = LatencyModel(slack=0.0)
    model.step_s = {1: 0.125, 4: 0.25}
    model.admit_s = 0.5
    assert model.choose_k(2.0, 1, 0, 64) == 16  # 2.0 / 0.125
    assert model.choose_k(2.0, 4, 2, 64) == 4  # (2.0 - 2 * 0.5) / 0.25
    assert model.choose_k(2.1, 4, 2, 64) == 4  # rounds down
    assert model.choose_k(2.0, 1, 0, 5) == 5  # capped at k_max
    assert model.choose_k(0.75, 4, 2, 5) == 0  # admissions alone overrun: no decode
    assert model.choose_k(math.inf, 4, 2, 5) == 5  # no deadline at all


def test_slack_keeps_a_share_of_the_time_left_free():
    model = LatencyModel(slack=0.25)
    model.step_s, model.admit_s = {4: 0.25}, 0.5
    assert model.choose_k(2.5, 4, 1, 64) == 6  # 2.5 / 1.25 = 2.0 = 0.5 + 6 * 0.25


def test_step_estimates_never_reach_zero_so_the_deadline_still_binds():
    """Two noisy timings of a tiny model can differ by less than nothing."""
    model = LatencyModel(slack=0.0)
    model.calibrate(8, step_s=-1e-4, call_s=-1e-5)
    assert (model.step_s[8], model.call_s[8]) == (MIN_STEP_S, 0.0)
    assert model.choose_k(0.0, 8, 0, 5) == 0
    model.observe_step(8, -0.5)
    assert model.step_s[8] == MIN_STEP_S
    assert model.choose_k(2.5 * MIN_STEP_S, 8, 0, 5) == 2


def test_choose_k_needs_a_timing_for_the_bucket():
    with pytest.raises(ValueError, match="bucket 2"):
        LatencyModel().choose_k(1.0, 2, 0, 4)


@given(
    step=st.floats(1e-4, 1.0),
    admit=st.floats(0.0, 1.0),
    n_admit=st.integers(0, 8),
    time_left=st.floats(-1.0, 10.0),
    k_max=st.integers(1, 32),
)
def test_choose_k_property(step, admit, n_admit, time_left, k_max):
    model = LatencyModel()
    model.step_s, model.admit_s = {2: step}, admit
    k = model.choose_k(time_left, 2, n_admit, k_max)
    cost, scale = n_admit * admit, 1 + model.slack
    assert 0 <= k <= k_max
    assert k == 0 or (cost + k * step) * scale <= time_left * (1 + 1e-9)
    assert k == k_max or (cost + (k + 1) * step) * scale > time_left * (1 - 1e-9) - 1e-12


# --------------------------------------------------------------------------- properties


@dataclasses.dataclass
class Simulation:
    """Drives a scheduler like the engine: arrivals, admission, k tokens per row, finish."""

    sched: Scheduler
    produced: dict[int, int] = dataclasses.field(default_factory=dict)
    finished: list[int] = dataclasses.field(default_factory=list)
    evicted: list[int] = dataclasses.field(default_factory=list)
    admitted: list[int] = dataclasses.field(default_factory=list)
    rejected: int = 0
    demanded: int = 0

    def frame(self, frame: int, arrivals: list[int], k: int) -> None:
        for n in arrivals:
            self.sched.demand("ask", max_tokens=n)
        self.demanded += len(arrivals)
        before = sorted(self.sched.active)
        result = self.sched.admit(frame)
        self.check(result)
        evicted = [r.id for r in result.evicted]
        assert evicted == before[: len(evicted)]  # the oldest go first
        self.rejected += result.rejected
        self.evicted += evicted
        for req in result.admitted:
            self.admitted.append(req.id)
            self.produced[req.id] = 1  # the first token comes with admission
        for req in list(self.sched.active.values()):
            self.produced[req.id] = min(req.max_tokens, self.produced[req.id] + k)
            if self.produced[req.id] == req.max_tokens:
                self.finished.append(self.sched.finish(req.id).id)

    def check(self, result) -> None:
        active = list(self.sched.active.values())
        slots = [r.slot for r in active]
        capacity = self.sched.capacity
        assert len(slots) == len(set(slots)) and all(0 <= s < capacity for s in slots)
        assert len(active) <= capacity
        if active:
            need = max(slots) + 1
            assert result.bucket == min(b for b in BUCKETS if b >= need)
        else:
            assert result.bucket == 0
        limit = self.sched.max_queue if self.sched.pool_full == "queue" else 0
        assert len(self.sched.queue) <= limit
        ids = [r.id for r in result.admitted]
        assert ids == list(range(len(self.admitted), len(self.admitted) + len(ids)))


arrival_patterns = st.lists(st.lists(st.integers(1, 6), max_size=5), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(
    pattern=arrival_patterns,
    policy=st.sampled_from(["queue", "skip", "evict_oldest"]),
    capacity=st.integers(1, 8),
    max_queue=st.integers(0, 4),
    k=st.integers(1, 4),
)
def test_random_arrivals_keep_the_pool_consistent_and_everything_ends(
    pattern, policy, capacity, max_queue, k
):
    sim = Simulation(scheduler(capacity, policy, max_queue))
    for frame, arrivals in enumerate(pattern):
        sim.frame(frame, arrivals, k)
    for frame in range(len(pattern), len(pattern) + 10 * (capacity + max_queue) + 10):
        sim.frame(frame, [], k)
    # Every request was admitted or rejected; every admitted one finished or was evicted.
    assert sim.demanded == len(sim.admitted) + sim.rejected
    assert sorted(sim.finished + sim.evicted) == sim.admitted
    assert (sim.sched.active, len(sim.sched.queue)) == ({}, 0)
    if policy != "evict_oldest":
        assert sim.evicted == []
