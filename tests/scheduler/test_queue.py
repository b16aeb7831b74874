from __future__ import annotations

from suanli.scheduler import PriorityClass, Request
from suanli.scheduler.queue import PendingQueue


def req(prio: PriorityClass) -> Request:
    return Request(gpu_count=1, priority=prio)


def test_class_then_arrival_and_idempotent_push():
    q = PendingQueue()
    q.push("spot-early", req(PriorityClass.SPOT), 1.0)
    q.push("od-late", req(PriorityClass.ON_DEMAND), 5.0)
    q.push("od-early", req(PriorityClass.ON_DEMAND), 2.0)
    q.push("res", req(PriorityClass.RESERVED), 9.0)
    q.push("od-early", req(PriorityClass.ON_DEMAND), 0.0)  # already queued: no-op
    assert [k for k, _ in q.ordered()] == ["res", "od-early", "od-late", "spot-early"]
    assert len(q) == 4


def test_remove_while_iterating_and_fairness_hook():
    usage = {"a": 10.0, "b": 1.0}
    q = PendingQueue(fair_key=lambda key, r: usage[key[0]])
    q.push(("a", 1), req(PriorityClass.ON_DEMAND), 1.0)
    q.push(("b", 1), req(PriorityClass.ON_DEMAND), 2.0)
    order = []
    for key, _ in q.ordered():
        order.append(key)
        q.remove(key)
    assert order == [("b", 1), ("a", 1)] and len(q) == 0
