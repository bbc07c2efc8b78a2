"""Which leases a process claims and which it gives up in a round: a pure function.

Fair: with N live processes and J jobs, each aims at ceil(J / N) leases. A
process under its share claims free (or expired, or dead-held) leases; one
over its share releases the excess while another live process is under its
own, so a process that starts late gets its share within a round or two.

Grouped: the SSH jobs of one host share one connection per process, so a
process prefers the jobs of hosts it already reads, then whole hosts, then
local jobs; when it must give some up, it gives up finished jobs first
(nothing left to ingest), then local ones, and SSH hosts last.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from training_platform.store.leases import LeaseRow
from training_platform.store.models import TERMINAL_STATUSES


@dataclass(frozen=True)
class LeasePlan:
    claim: list[str]
    release: list[str]


def fair_share(jobs: int, live_processes: int) -> int:
    return math.ceil(jobs / max(1, live_processes))


def plan_round(
    rows: Sequence[LeaseRow],
    me: str,
    live: frozenset[str],
    dead: frozenset[str] = frozenset(),
) -> LeasePlan:
    """What `me` claims and releases, given every lease (`rows`), the live processes
    (`live`, `me` among them) and the holders known to be gone (`dead`)."""
    share = fair_share(len(rows), len(live | {me}))
    mine = [row for row in rows if row.holder == me]
    if len(mine) < share:
        takeable = [row for row in rows if _takeable(row, me, live, dead)]
        return LeasePlan(claim=_claim_order(takeable, mine)[: share - len(mine)], release=[])
    excess = len(mine) - share
    if excess <= 0:
        return LeasePlan(claim=[], release=[])
    held = Counter(row.holder for row in rows if row.holder in live and not row.expired)
    if not any(held.get(other, 0) < share for other in live - {me}):
        return LeasePlan(claim=[], release=[])  # nobody under its share to take them
    return LeasePlan(claim=[], release=_release_order(mine)[:excess])


def _takeable(row: LeaseRow, me: str, live: frozenset[str], dead: frozenset[str]) -> bool:
    if row.holder == me:
        return False
    # A holder missing from `live` but whose lease has not expired is left alone:
    # its heartbeat and its renewals share a transaction, so it is only late.
    return row.holder is None or row.expired or row.holder in dead


def _claim_order(takeable: list[LeaseRow], mine: list[LeaseRow]) -> list[str]:
    """Hosts already read first, then whole hosts (largest first), then local jobs."""
    my_hosts = {row.ssh_host for row in mine if row.source == "ssh"}
    per_host = Counter(row.ssh_host for row in takeable if row.source == "ssh")

    def rank(row: LeaseRow) -> tuple[int, int, str, str]:
        if row.source != "ssh":
            return (2, 0, "", row.job_id)
        first = 0 if row.ssh_host in my_hosts else 1
        return (first, -per_host[row.ssh_host], row.ssh_host or "", row.job_id)

    return [row.job_id for row in sorted(takeable, key=rank)]


def _release_order(mine: list[LeaseRow]) -> list[str]:
    """Finished jobs first, then local ones, then SSH jobs of the smallest hosts."""
    per_host = Counter(row.ssh_host for row in mine if row.source == "ssh")

    def rank(row: LeaseRow) -> tuple[int, int, str, str]:
        if row.status in TERMINAL_STATUSES:
            return (0, 0, "", row.job_id)
        if row.source != "ssh":
            return (1, 0, "", row.job_id)
        return (2, per_host[row.ssh_host], row.ssh_host or "", row.job_id)

    return [row.job_id for row in sorted(mine, key=rank)]
