"""Who measures with whom: pure pairing logic for the bandwidth test.

Pairs go first in inventory order. A pair that stays slow after its retries
is split, and each of its hosts is measured again with a partner from a
pair that was fine, so the report names the culprit and not the pair.
"""

from __future__ import annotations


def first_rounds(hosts: list[str]) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint (server, client) pairs covering every host."""
    pairs = [(hosts[i], hosts[i + 1]) for i in range(0, len(hosts) - 1, 2)]
    rounds = [pairs] if pairs else []
    if len(hosts) % 2 == 1 and len(hosts) > 1:
        rounds.append([(hosts[0], hosts[-1])])  # the odd host out, with the first
    return rounds


def isolation_round(slow_pairs: list[tuple[str, str]], good: list[str]) -> list[tuple[str, str]]:
    """Pair each host of each slow pair with a distinct known-good host;
    a host of the pair that was fine in another pair is not retested.

    Returns (good_server, suspect_client) pairs; suspects left without a
    partner are simply absent. A good host serves one suspect per round.
    """
    free = list(good)
    pairs = []
    for a, b in slow_pairs:
        for suspect in (a, b):
            if suspect in good:
                continue  # fine in another pair: its partner is the suspect, and it may serve as a partner
            partner = next((g for g in free if g not in (a, b)), None)
            if partner is None:
                continue
            free.remove(partner)
            pairs.append((partner, suspect))
    return pairs
