"""What an SSH job's `host` may be: a host name or an IP address, nothing else.

The host is handed to the resolver and to paramiko, and shown in messages
and the dashboard. Text that is neither a name nor an address (spaces, shell
metacharacters, a leading "-" that `ssh` would take as an option, `user@host`
or `host:port` in the wrong field) cannot name a machine; refusing it at
registration says so at once instead of as a confusing sync error later, and
keeps it out of anything that might one day pass it to a command line.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

MAX_NAME: Final = 253  # a DNS name in text, without its optional final dot

# RFC 1123 labels, plus "_": Docker and compose service names carry it, and
# it means nothing to a shell or to ssh's option parser.
_LABEL: Final = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
# An IPv6 zone ("fe80::1%eth0"): an interface name or number. ipaddress
# accepts any text there, ";" and spaces included.
_ZONE: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def check_ssh_host(text: str) -> str:
    """`text` as the host to connect to, else ValueError saying why.

    Accepts a DNS host name (RFC 1123 labels, "_" allowed, an optional final
    dot), an IPv4 address, or an IPv6 address, bare or in brackets as URLs
    write it (returned bare: that is what the resolver takes), with an
    optional zone made of letters, digits, "_", "." and "-".
    """
    if not text:
        raise ValueError("the host is empty")
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1]
        if not _is_ipv6(inner):
            raise ValueError(f"{text!r} is not an IPv6 address in brackets")
        return inner
    if _is_ip(text):
        return text
    if not text.isascii():
        raise ValueError(
            f"{text!r}: host names are ASCII (write an internationalised name in its xn-- form)"
        )
    name = text.removesuffix(".")
    if len(name) > MAX_NAME:
        raise ValueError(f"the host is longer than {MAX_NAME} characters")
    labels = name.split(".")
    # An all-digit last label ("127.1", "1.2.3.256") is no name: the resolver
    # would read it as a (shorthand or broken) IPv4 address.
    if all(_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit():
        return text
    raise ValueError(f"{text!r} is not a host name or an IP address{_hint(text)}")


def _hint(text: str) -> str:
    if "@" in text:
        return "; give the user in 'username'"
    if ":" in text and not text.startswith("["):
        return "; give the port in 'port'"
    return ""


def _is_ip(text: str) -> bool:
    if ":" in text:
        return _is_ipv6(text)
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _is_ipv6(text: str) -> bool:
    address, _, zone = text.partition("%")
    if "%" in text and not _ZONE.fullmatch(zone):
        return False
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True
