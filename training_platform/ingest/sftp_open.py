"""Opening a job's file on an SSH host: a regular file, not reached through a symlink.

SFTP (version 3, what OpenSSH speaks) has no O_NOFOLLOW: its `open` follows a
symlink. So the path's type is looked at first (`lstat`), which leaves a gap
between the look and the open; a trainer swapping its file for a symlink and
back as fast as renames go won that race over loopback many times a second,
and the platform stored or served the file the link pointed at (its run file,
samples file, rollout step files and profiles; issue 23 §5).

The gap is narrowed by comparing what was opened (`fstat` of the handle) with
what the path was just before and just after the open (two `lstat`s): file
type, owner and permissions must be the same, and size and modification time
must lie between the two looks (a file that grows meanwhile is fine). A file
reached through a swapped-in link passes only if it is indistinguishable by
those attributes from the job's own file. A mismatch is tried again a few
times (a writer that replaces its file by rename may do so at that instant),
then refused. SFTP gives no inode to compare, so this is a narrowing, not
the kernel's guarantee that the local readers have (`safe_paths.py`).
"""

from __future__ import annotations

import stat
from typing import Final

import paramiko

from training_platform.errors import MetricsSourceError, SourceRefusedError
from training_platform.ingest.readers import SYMLINK_REFUSED, NotRegularFileError

# Opens tried before a file whose identity keeps changing under us is refused.
OPEN_TRIES: Final = 3


class SymlinkRefusedError(SourceRefusedError):
    """A symlink where a job's file should be (PLATFORM_FOLLOW_SYMLINKS is off)."""


class FileSwappedError(MetricsSourceError):
    """The path named another file at each try while it was being opened (not a
    policy refusal: the file may be fine at the next sync)."""


def check_remote_type(info: paramiko.SFTPAttributes, where: str) -> None:
    """Refuse a symlink (`SymlinkRefusedError`) or anything but a regular file
    (`NotRegularFileError`), as `info` (an lstat, or a stat when following) says.

    Looked at before any open: the remote sftp-server opens a FIFO blocking,
    which hung each sync until the timeout and left a stuck process behind.
    """
    mode = info.st_mode or 0
    if stat.S_ISLNK(mode):
        raise SymlinkRefusedError(f"{where} {SYMLINK_REFUSED}")
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"{where} is not a regular file")


def _same_file(
    before: paramiko.SFTPAttributes,
    opened: paramiko.SFTPAttributes,
    after: paramiko.SFTPAttributes,
) -> bool:
    """Whether `opened` can be the file the path named at both looks around the open."""
    for name in ("st_mode", "st_uid", "st_gid"):
        if not getattr(before, name) == getattr(opened, name) == getattr(after, name):
            return False
    for name in ("st_size", "st_mtime"):
        if not (getattr(before, name) or 0) <= (getattr(opened, name) or 0):
            return False
        if not (getattr(opened, name) or 0) <= (getattr(after, name) or 0):
            return False
    return True


def open_remote_regular(
    sftp: paramiko.SFTPClient, path: str, where: str, *, follow_symlinks: bool
) -> tuple[paramiko.SFTPFile, int]:
    """The opened regular file at `path` and its size; the caller closes it.

    Without `follow_symlinks` a symlink is refused (`SymlinkRefusedError`), and a
    file that was not what the path named around the open (see the module
    docstring) is refused after `OPEN_TRIES` tries (`FileSwappedError`). A
    FIFO, directory or device is `NotRegularFileError`, never opened. SFTP
    status errors (FileNotFoundError, PermissionError) pass through. `where`
    names the file in messages.
    """
    look = sftp.stat if follow_symlinks else sftp.lstat
    for _ in range(OPEN_TRIES):
        before = look(path)
        check_remote_type(before, where)
        file = sftp.open(path, "rb")
        try:
            opened = file.stat()
            after = look(path)
        except BaseException:
            file.close()
            raise
        if _same_file(before, opened, after):
            return file, opened.st_size or 0
        file.close()
    raise FileSwappedError(
        f"{where} was a different file at each of {OPEN_TRIES} tries to open it "
        "(a symlink swapped in and out?); not read"
    )
