"""The system file's names: one per job, one per host, hostile host names made plain words."""

from __future__ import annotations

import pytest

from training_platform.callbacks.wire.system_file import (
    host_field,
    safe_host_name,
    system_file_name,
)


def test_the_callbacks_file_and_a_hosts_file() -> None:
    assert system_file_name("run7") == "run7_system.jsonl"
    assert system_file_name("run7", "gpu-node-3") == "run7_system.gpu-node-3.jsonl"


@pytest.mark.parametrize(
    ("host", "word"),
    [
        ("../../etc/passwd", "_.._etc_passwd"),
        ("a/b c", "a_b_c"),
        ("..", "host"),
        ("", "host"),
        (".hidden", "hidden"),
        ("new\nline", "new_line"),
        ("café", "caf_"),
        ("x" * 300, "x" * 64),
        ("a\udcffb", "a_b"),  # an undecodable byte of argv
    ],
)
def test_a_hostile_host_name_is_a_plain_word(host: str, word: str) -> None:
    assert safe_host_name(host) == word
    name = system_file_name("j", host)
    assert "/" not in name and "\\" not in name and not name.startswith(".")


def test_the_lines_host_is_valid_text() -> None:
    assert host_field("gpu-node-3") == "gpu-node-3"
    assert host_field("a\udcffb") == "a\ufffdb"  # the byte 0xff, as Python read it from argv
    assert host_field("a\ud800b") == "a?b"
    assert len(host_field("x" * 1000)) == 255
