"""The fair-share plan of a lease round (pure: rows in, claims and releases out)."""

from __future__ import annotations

from training_platform.ingest.lease_plan import fair_share, plan_round
from training_platform.store.leases import LeaseRow


def row(
    job_id: str,
    holder: str | None = None,
    *,
    expired: bool = False,
    host: str | None = None,
    status: str = "running",
) -> LeaseRow:
    source = "ssh" if host else "local"
    return LeaseRow(job_id, holder, 1, expired, 0.0, source, host, status)


def test_the_share_is_the_ceiling_of_jobs_over_processes() -> None:
    assert [fair_share(10, n) for n in (1, 2, 3, 4, 0)] == [10, 5, 4, 3, 10]


def test_a_process_claims_free_and_expired_leases_up_to_its_share() -> None:
    rows = [row("a"), row("b", "other", expired=True), row("c", "other"), row("d")]
    plan = plan_round(rows, "me", frozenset({"me", "other"}))
    assert plan.claim == ["a", "b"] and plan.release == []  # c is other's, share 2


def test_a_dead_holders_jobs_are_claimable_before_they_expire() -> None:
    rows = [row("a", "dead"), row("b", "dead")]
    plan = plan_round(rows, "me", frozenset({"me"}), frozenset({"dead"}))
    assert sorted(plan.claim) == ["a", "b"]


def test_a_late_holder_that_is_not_live_is_left_alone_until_its_lease_expires() -> None:
    rows = [row("a", "late"), row("b")]
    assert plan_round(rows, "me", frozenset({"me"})).claim == ["b"]


def test_a_process_over_its_share_releases_finished_then_local_jobs_first() -> None:
    rows = [
        row("ssh1", "me", host="gpu1"),
        row("local", "me"),
        row("done", "me", status="completed"),
        row("ssh2", "me", host="gpu1"),
    ]
    plan = plan_round(rows, "me", frozenset({"me", "new"}))  # share 2, new holds 0
    assert plan.claim == [] and plan.release == ["done", "local"]


def test_nobody_under_its_share_means_nothing_is_released() -> None:
    rows = [row("a", "me"), row("b", "me"), row("c", "me"), row("d", "x"), row("e", "x")]
    plan = plan_round(rows, "me", frozenset({"me", "x"}))  # share 3, x holds 2 < 3
    assert plan.release == []  # me holds exactly its share
    rows.append(row("f", "me"))
    rows.append(row("g", "x"))
    plan = plan_round(rows, "me", frozenset({"me", "x"}))  # share 4, me 4, x 3
    assert plan.release == []


def test_claims_keep_one_hosts_jobs_together() -> None:
    rows = [
        row("mine", "me", host="gpu2"),
        row("l1"),
        row("a1", host="gpu1"),
        row("b1", host="gpu2"),
        row("a2", host="gpu1"),
        row("c1", host="gpu3"),
    ]
    plan = plan_round(rows, "me", frozenset({"me", "x"}))  # share 3: 2 more
    # gpu2 first (already read here), then the largest whole host.
    assert plan.claim == ["b1", "a1"]
