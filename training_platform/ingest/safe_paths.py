"""Opening files under a directory without ever leaving it, and checking path input.

A check-then-open ("is it a symlink? no: open it") loses the race against a
process that swaps the file for a symlink in between. `open_regular_beneath`
closes that gap the way openat2's RESOLVE_BENEATH does, portably: it walks
from a descriptor of the trusted directory one component at a time with
O_NOFOLLOW, so no component can be a symlink at the moment it is opened, and
checks the type of what it actually opened (fstat), not of what a path named
a moment earlier. O_NONBLOCK makes opening a FIFO return at once instead of
waiting for a writer forever.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Final

# Linux limits: a longer name or path fails in the kernel with ENAMETOOLONG.
NAME_MAX: Final = 255
PATH_MAX: Final = 4095

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotServableError(OSError):
    """The path exists but is not a regular file reached without symlinks."""


def open_regular_beneath(directory: Path, relative: str) -> int:
    """A read-only descriptor of the regular file `directory/relative`.

    `relative` is "/"-separated and already free of "", "." and "..". No
    component of it may be a symlink (ELOOP / ENOTDIR from the kernel); the
    file must be a regular file (`NotServableError`). `directory` itself is
    trusted (it may be reached through symlinks). Raises OSError
    (FileNotFoundError, NotADirectoryError, ...) when it cannot be reached.
    """
    parts = relative.split("/")
    fd = os.open(directory, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        # Looked at before opening so that a device node is never opened (an
        # open can have side effects there); fstat below is what decides.
        if not stat.S_ISREG(os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode):
            raise NotServableError(errno.EPERM, "not a regular file", relative)
        file_fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            raise NotServableError(errno.EPERM, "not a regular file", relative)
    except BaseException:
        os.close(file_fd)
        raise
    return file_fd


def check_path_text(text: str, what: str) -> str:
    """`text` if the kernel could take it as a path, else ValueError saying why.

    Catches what would otherwise surface as a 500 deep inside a file-system
    call: NUL bytes, text that is not encodable, a component over 255 bytes,
    a path over 4095 bytes, and ``~user`` for a user that does not exist.
    """
    if "\x00" in text:
        raise ValueError(f"{what} contains a NUL byte")
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode text") from None
    if len(encoded) > PATH_MAX:
        raise ValueError(f"{what} is {len(encoded)} bytes long; the limit is {PATH_MAX}")
    longest = max(len(part) for part in encoded.split(b"/"))
    if longest > NAME_MAX:
        raise ValueError(f"{what} has a component of {longest} bytes; the limit is {NAME_MAX}")
    if text.startswith("~"):
        try:
            Path(text).expanduser()
        except RuntimeError:  # "Could not determine home directory."
            user = text[1:].split("/", 1)[0] or "the current user"
            raise ValueError(f"{what} starts with ~ but {user} has no home directory") from None
    return text
