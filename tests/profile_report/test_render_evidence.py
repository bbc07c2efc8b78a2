"""The text report's recommendation evidence: readable "key value" lines, never JSON, never cut."""

from __future__ import annotations

from typing import Any

from training_platform.profile_report.render import evidence_lines, evidence_value, render_text

SYNC_EVIDENCE = {
    "per_step": 12,
    "sync_time_share": 0.071234567,
    "thresholds": {"per_step": 5, "time_share": 0.05},
}


def _report(evidence: dict[str, Any]) -> dict[str, Any]:
    return {
        "profile": "/tmp/profiles",
        "problems": [],
        "notes": [],
        "ok": True,
        "operators": {"top": []},
        "recommendations": [
            {
                "rule": "host_device_sync",
                "severity": "warning",
                "title": "Host-device synchronisations",
                "detail": "The host waits for the device.",
                "evidence": evidence,
            }
        ],
    }


def test_evidence_reads_as_key_value_text() -> None:
    text = render_text(_report(SYNC_EVIDENCE))
    evidence = [line for line in text.splitlines() if "evidence" in line]
    assert evidence == [
        "      evidence: per step 12; sync time share 0.07123; "
        "thresholds per step 5, time share 0.05"
    ]
    assert "{" not in text and '"' not in text


def test_long_evidence_wraps_between_values_never_inside_one() -> None:
    anomalies = [{"step": step, "allocated_gib": 10 + step / 3} for step in range(40)]
    fits = {
        f"gpu{i}_allocated": {"slope_mib_per_step": 1.23456 * i, "leak": True} for i in range(8)
    }
    values = {
        "fits": fits,
        "anomalies": anomalies,
        "ratio": 123456.789,
        "lr": 2.5e-7,
    }
    lines = evidence_lines(values, width=60)
    assert len(lines) > 2
    assert lines[0].startswith("      evidence: fits ")
    assert all(len(line) <= 60 for line in lines), lines
    assert all(line.startswith("        ") for line in lines[1:])
    words = " ".join(line.strip() for line in lines).split()
    # Every number comes out whole: the words are the formatted values, not pieces of them.
    assert "1.235," in words and "2.5e-7" in words and "1.235e5;" in words
    assert "(+36 more);" in " ".join(words)
    assert "{" not in "".join(lines)


def test_values_are_formatted_briefly() -> None:
    assert evidence_value(3e-05) == "3e-5"
    assert evidence_value(0.0712345) == "0.07123"
    assert evidence_value(12.0) == "12"
    assert evidence_value(123456) == "123,456"
    assert evidence_value(None) == "–"
    assert evidence_value(["rollout", "reward"]) == "rollout, reward"
    assert evidence_value([]) == "none"
    assert evidence_value({"a": {"b": {"c": 1}}}) == "a b 1 value"
    assert evidence_lines({}) == []
