"""Who measures with whom: pure pairing logic for the pairwise tests
(ib_write_bw, the two-node all-reduce).

Pairs go first in inventory order. A pair that stays bad after its retries
is split, and each of its hosts is measured again with a partner from a
pair that was fine, so the report names the culprit and not the pair.
Where no host is known good yet, a suspect is paired with a host whose own
pair never ran (its partner was named at fault before anything moved), and
where there is none of those either, two unresolved hosts that were never
paired together are tried (a few rounds at most): one good pair clears two
hosts and gives the next round its partners.

A pair result is anything with ``server``, ``client``, ``slow`` (bool),
``errors`` (list: the pair could not measure) and optionally ``wrong``
(bool: the pair moved wrong data, never retried) and ``culprits`` (the
hosts the run itself named at fault, e.g. the one where the launcher found
no binary: the other host of that pair never ran).
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
            if suspect in good or suspect in done or any(suspect == c for _, c in pairs):
                continue  # fine in another pair (it may serve as a partner), already retested or placed
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


def _culprits(r) -> tuple:
    return tuple(getattr(r, "culprits", ()) or ())


# Rounds that pair two unresolved hosts with each other, when nothing better is left.
BLIND_ROUNDS = 3


def cover(names: list[str], run_round, retries: int, retryable=_retry_slow_or_unmeasurable) -> dict:
    """Every host measured in one round of pairs (plus the odd one), then
    each host of a bad pair measured again with a known-good partner (or,
    while there is none, as the module says). Returns ``{host: (result,
    note)}``: the result that speaks for the host, and a note saying how it
    was isolated (None when its first pair was fine)."""
    results = [r for pairs in first_rounds(names) for r in with_retries(run_round, pairs, retries, retryable)]
    first = list(results)
    tried = {frozenset((r.server, r.client)) for r in results}
    retest: dict = {}  # a suspect's run with a partner known good when the round was planned
    blind = 0
    while True:
        # known good, in the order they were cleared: the first round's before those cleared since
        good = list(dict.fromkeys(n for r in results if not bad(r) for n in (r.server, r.client)))
        named = {n for r in results if bad(r) for n in _culprits(r)} - set(good)
        touched = [r for r in results if bad(r)]
        unresolved = [n for n in names if n not in good and n not in named and n not in retest
                      and any(n in (r.server, r.client) for r in touched)]
        # never ran: every bad pair it was in named its partner, not it
        fresh = [n for n in unresolved if all(_culprits(r) and n not in _culprits(r)
                                              for r in touched if n in (r.server, r.client))]
        suspects = [n for n in unresolved if n not in fresh]
        bad_pairs = list(dict.fromkeys((r.server, r.client) for r in touched))
        pairs = isolation_round([p for p in bad_pairs if set(p) & set(unresolved)], good,
                                frozenset(set(names) - set(unresolved)))
        busy = {h for p in pairs for h in p}
        for s in suspects:  # no known-good partner left: one whose pair never ran tells as well
            p = next((f for f in fresh if f not in busy | {s} and frozenset((f, s)) not in tried), None)
            if p is not None and s not in busy:
                pairs.append((p, s))
                busy |= {p, s}
        if not pairs and blind < BLIND_ROUNDS:
            blind += 1
            for s in unresolved:
                p = next((o for o in unresolved if o not in busy | {s} and frozenset((o, s)) not in tried), None)
                if p is not None and s not in busy:
                    pairs.append((s, p))
                    busy |= {p, s}
        if not pairs:
            break
        got = with_retries(run_round, pairs, retries, retryable)
        results += got
        tried |= {frozenset((r.server, r.client)) for r in got}
        retest.update({r.client: r for r in got if r.server in good})
    return _placed(names, first, results, retest)


def _placed(names, first, results, retest) -> dict:
    """Each host's result and note from every run made."""
    out: dict = {}
    for name in names:
        mine = [r for r in results if name in (r.server, r.client)]
        opening = next((r for r in first if name in (r.server, r.client) and not bad(r)), None)
        if opening is not None:
            out[name] = (opening, None)
            continue
        if not mine:
            continue
        earlier = next((r for r in mine if bad(r)), mine[0])
        partner = earlier.client if earlier.server == name else earlier.server
        what = _what(earlier)
        named = next((r for r in mine if bad(r) and name in _culprits(r)), None)
        cleared = next((r for r in mine if not bad(r)), None)
        r = retest.get(name)
        if named is not None and cleared is None:
            out[name] = (named, "named at fault by the run's own output")
        elif r is not None and r is cleared or (r is None and cleared is not None):
            other = cleared.client if cleared.server == name else cleared.server
            known = "known-good " if r is not None else ""
            out[name] = (cleared, f"{what} with {partner}, fine with {known}{other}")
        elif r is None:
            note = (f"slow with {partner}; no known-good partner left to tell which is at fault"
                    if earlier.slow else f"never ran: {partner} was named at fault, and no partner was left"
                    if partner in _culprits(earlier) else None)
            out[name] = (earlier, note)
        elif r.errors:
            out[name] = (r, f"{what} with {partner}, unmeasurable with known-good {r.server}")
        elif getattr(r, "wrong", False):
            out[name] = (r, f"{what} with {partner}, wrong results with known-good {r.server}")
        else:
            out[name] = (r, f"{what} with {partner} and with known-good {r.server}")
    return out
