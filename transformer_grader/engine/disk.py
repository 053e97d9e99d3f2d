"""What a kernel keeps on disk, watched while it runs.

A sandboxed kernel writes to disk in one place: its private folder (its ``/tmp`` is in
memory and bounded). ``RLIMIT_FSIZE`` holds each file to ``Limits.file_mb``, but not the
number of files, so without a watch one notebook could fill the grader's disk before its
timeout, and the batch (its CSV included) would fail with it. ``overuse`` adds up the
private folder (``kernel.watch`` asks a few times a second), and the kernel is stopped
once the folder holds more than ``Limits.disk_mb`` or more than ``Limits.files``
entries: filling the disk costs its own student only. An honest notebook writes a few
small files there.

The walk never follows a link (a link counts as one entry, not as what it points to) and
counts the blocks a file really uses (a sparse file costs what it stores). A folder the
grader cannot read, which only a kernel of the grader's own user can make, stops the
kernel too: what cannot be measured is not allowed.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


def overuse(folder: Path, max_bytes: int, max_entries: int) -> str | None:
    """None while ``folder`` holds at most ``max_bytes`` bytes in at most
    ``max_entries`` entries; else what went over (the walk stops there)."""
    used, entries = 0, 0
    pending = [str(folder)]
    while pending:
        current = pending.pop()
        try:  # a folder swapped for a link since it was seen is not entered
            fd = os.open(current, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except PermissionError:
            return "its folder held a folder the grader may not read"
        except OSError:  # gone, or no longer a folder, since it was seen
            continue
        try:
            with os.scandir(fd) as listing:
                for entry in listing:
                    entries += 1
                    if entries > max_entries:
                        return (
                            f"its folder held more than {max_entries} files and folders"
                        )
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:  # removed while we looked
                        continue
                    used += info.st_blocks * 512  # what it really takes on disk
                    if used > max_bytes:
                        return f"its folder held more than {max_bytes // 2**20} MB of files"
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(os.path.join(current, entry.name))
        finally:
            os.close(fd)
    return None


def remove(folder: Path) -> None:
    """Delete a private folder once its kernel has ended, whatever modes the kernel left
    on the folders in it (a folder its owner may not read would stop ``rmtree`` when
    the grader is not root). Links are never followed."""
    for parent, folders, _ in os.walk(folder):  # top-down: opened after its chmod
        for name in folders:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                try:
                    os.chmod(path, 0o700)
                except OSError:
                    pass
    shutil.rmtree(folder, ignore_errors=True)
