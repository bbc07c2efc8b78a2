"""`{job_id}_system.jsonl`: where system samples go (docs/contract.md, System metrics).

The callback's sampler writes ``{job_id}_system.jsonl`` beside the metrics
file; ``training-platform sysmon`` on another node of the run writes
``{job_id}_system.{host}.jsonl``, one file per host, so that several hosts
never append to one file through a shared file system. A host name comes
from the machine or the command line, so it is made a plain file-name word
here, in the one place the platform will read the names back from.
"""

from __future__ import annotations

import re
from typing import Final

SYSTEM_SUFFIX: Final = "_system.jsonl"
MAX_HOST_CHARS: Final = 64  # in a file name; the line's `host` keeps up to MAX_HOST_FIELD
MAX_HOST_FIELD: Final = 255  # a DNS name's limit
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")


def safe_host_name(host: str) -> str:
    """`host` as a file-name word: ``A-Z a-z 0-9 . _ -`` only (every other run of
    characters becomes ``_``), no leading dot (no hidden file, no ``..``), at most
    `MAX_HOST_CHARS` characters; ``host`` when nothing is left."""
    word = _UNSAFE.sub("_", host).lstrip(".")[:MAX_HOST_CHARS]
    return word or "host"


def host_field(host: str) -> str:
    """`host` as the lines' ``host`` value: valid UTF-8 (an undecodable byte of a
    command-line argument becomes U+FFFD) and at most `MAX_HOST_FIELD` characters."""
    try:  # the bytes Python read from argv (an undecodable one is a lone surrogate)
        data = host.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # another lone surrogate: no bytes behind it
        data = host.encode("utf-8", "replace")
    return data.decode("utf-8", "replace")[:MAX_HOST_FIELD]


def system_file_name(job_id: str, host: str | None = None) -> str:
    """``{job_id}_system.jsonl``, or ``{job_id}_system.{host}.jsonl`` for one host's file."""
    if host is None:
        return f"{job_id}{SYSTEM_SUFFIX}"
    return f"{job_id}_system.{safe_host_name(host)}.jsonl"
