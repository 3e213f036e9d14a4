"""Who measures with whom: pure pairing logic for the pairwise tests
(ib_write_bw, the two-node all-reduce).

Pairs go first in inventory order. A pair that stays slow after its retries
is split, and each of its hosts is measured again with a partner from a
pair that was fine, so the report names the culprit and not the pair.

A pair result is anything with ``server``, ``client``, ``slow`` (bool),
``errors`` (list: the pair could not measure) and optionally ``wrong``
(bool: the pair moved wrong data, never retried).
"""

from __future__ import annotations


def first_rounds(hosts: list[str]) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint (server, client) pairs covering every host."""
    pairs = [(hosts[i], hosts[i + 1]) for i in range(0, len(hosts) - 1, 2)]
    rounds = [pairs] if pairs else []
    if len(hosts) % 2 == 1 and len(hosts) > 1:
        rounds.append([(hosts[0], hosts[-1])])  # the odd host out, with the first
    return rounds


def isolation_round(slow_pairs: list[tuple[str, str]], good: list[str],
                    done: frozenset = frozenset()) -> list[tuple[str, str]]:
    """Pair each host of each slow pair with a distinct known-good host;
    a host of the pair that was fine in another pair is not retested.

    Returns (good_server, suspect_client) pairs; suspects left without a
    partner are simply absent. A good host serves one suspect per round;
    ``done`` are suspects already retested in an earlier round.
    """
    free = list(good)
    pairs = []
    for a, b in slow_pairs:
        for suspect in (a, b):
            if suspect in good or suspect in done:
                continue  # fine in another pair (it may serve as a partner), or already retested
            partner = next((g for g in free if g not in (a, b)), None)
            if partner is None:
                continue
            free.remove(partner)
            pairs.append((partner, suspect))
    return pairs


def bad(r) -> bool:
    return bool(r.slow or r.errors or getattr(r, "wrong", False))


def _what(r) -> str:
    return "wrong results" if getattr(r, "wrong", False) else "slow" if r.slow else "unmeasurable"


def _retry_slow_or_unmeasurable(r) -> bool:
    return bool(r.slow or r.errors)


def with_retries(run_round, pairs: list[tuple[str, str]], retries: int, retryable=_retry_slow_or_unmeasurable):
    """``run_round(pairs) -> [result]`` once, then again for the pairs
    ``retryable`` picks, at most ``retries`` times; a good rerun (or any
    rerun of a pair that could not measure) replaces the earlier result."""
    results = {(r.server, r.client): r for r in run_round(pairs)}
    for _ in range(retries):
        again = [key for key, r in results.items() if retryable(r)]
        if not again:
            break
        for r in run_round(again):
            if not bad(r) or results[(r.server, r.client)].errors:
                results[(r.server, r.client)] = r
    return list(results.values())


def cover(names: list[str], run_round, retries: int, retryable=_retry_slow_or_unmeasurable) -> dict:
    """Every host measured in one round of pairs (plus the odd one), then
    each host of a bad pair measured again with a known-good partner.
    Returns ``{host: (result, note)}``: the result that speaks for the
    host, and a note saying how it was isolated (None when its first pair was fine)."""
    out: dict = {}
    results = [r for pairs in first_rounds(names) for r in with_retries(run_round, pairs, retries, retryable)]
    for r in results:
        for name in (r.server, r.client):
            if name not in out or (not bad(r) and bad(out[name][0])):
                out[name] = (r, None)
    good = [n for n in names if not bad(out[n][0])]
    # Pairs that were bad are split against known-good hosts: one bad host
    # must not take its partner down with it.
    suspects = [(r.server, r.client) for r in results if bad(r)]
    retest: dict = {}
    while suspects:  # more rounds only when there were more suspects than good partners
        pairs = isolation_round(suspects, good, frozenset(retest))
        if not pairs:
            break
        found = {r.client: r for r in with_retries(run_round, pairs, retries, retryable)}
        retest.update(found)
        good += [n for n, r in found.items() if not bad(r)]  # cleared: a partner for the next round
    for a, b in suspects:
        for suspect, partner in ((a, b), (b, a)):
            first = out[suspect][0]
            if not bad(first) or out[suspect][1] is not None:
                continue  # fine in another pair, or already placed from another bad pair
            r, what = retest.get(suspect), _what(first)
            if r is None:
                if first.slow:
                    out[suspect] = (first, f"slow with {partner}; no known-good partner left to tell which is at fault")
            elif r.errors:
                out[suspect] = (r, f"{what} with {partner}, unmeasurable with known-good {r.server}")
            elif getattr(r, "wrong", False):
                out[suspect] = (r, f"{what} with {partner}, wrong results with known-good {r.server}")
            elif r.slow:
                out[suspect] = (r, f"{what} with {partner} and with known-good {r.server}")
            else:
                out[suspect] = (r, f"{what} with {partner}, fine with known-good {r.server}")
    return out
