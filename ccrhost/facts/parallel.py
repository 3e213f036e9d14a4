"""Fact reads on many hosts at once, from deploy code."""

from __future__ import annotations

import gevent
from pyinfra.context import ctx_host, ctx_state


def parallel_facts(state, calls: list) -> list:
    """Run (host, fact, kwargs) fact reads at once; results in call order."""
    def one(h, fact, kwargs):
        with ctx_state.use(state), ctx_host.use(h):
            return h.get_fact(fact, **kwargs)

    greenlets = [gevent.spawn(one, h, fact, kwargs) for h, fact, kwargs in calls]
    gevent.joinall(greenlets)
    return [g.value if g.successful() else {"error": f"{g.exception}"} for g in greenlets]
