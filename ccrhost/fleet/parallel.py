"""Fleet-wide work from deploy code: fact reads on many hosts at once, and
results computed once per run for every host."""

from __future__ import annotations

import gevent
import gevent.lock
from pyinfra.context import ctx_host, ctx_state

from ccrhost import failures


def parallel_facts(state, calls: list) -> list:
    """Run (host, fact, kwargs) fact reads at once; results in call order."""
    def one(h, fact, kwargs):
        with ctx_state.use(state), ctx_host.use(h):
            return h.get_fact(fact, **kwargs)

    greenlets = [gevent.spawn(one, h, fact, kwargs) for h, fact, kwargs in calls]
    gevent.joinall(greenlets)
    # A host whose read failed has been failed by pyinfra already (None
    # here); one whose read raised is failed here, with the reason.
    for g, (h, fact, _) in zip(greenlets, calls):
        if not g.successful():
            failures.record(h.name, f"reading {fact.__name__} failed: {type(g.exception).__name__}: {g.exception}")
            state.fail_hosts({h})
    return [g.value if g.successful() else None for g in greenlets]


# pyinfra runs each host's deploy code in its own greenlet: the first to get
# here computes for the whole fleet while the others wait for its result.
_LOCK = gevent.lock.Semaphore()


def once_per_run(inventory, key: str, compute):
    """``compute()`` on the first call of this run, its cached result after."""
    attr = f"_ccrhost_{key}"
    with _LOCK:
        if not hasattr(inventory, attr):
            setattr(inventory, attr, compute())
    return getattr(inventory, attr)
