"""A real full disk for tests: a small tmpfs mounted for the test (root with CAP_SYS_ADMIN; skipped
with the reason otherwise) and a file written until the filesystem says ENOSPC."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "3m") -> Iterator[Path]:
    """``where`` as a tmpfs of ``size``, unmounted at the end (also when the test fails)."""
    where.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                       text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {p.stderr.strip() or p.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(folder: Path) -> Path:
    """Write ``folder/filler`` until the filesystem is full (ENOSPC), the last 512-byte blocks too;
    returns it."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (65536, 512):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    assert os.statvfs(folder).f_bavail == 0
    return filler
