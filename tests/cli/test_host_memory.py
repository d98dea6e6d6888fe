"""Freed host memory is kept for reuse (glibc's mallopt), counted in page faults, not timed."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import mtl.cli.job

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 200 * 2**20  # a block above glibc's largest dynamic mmap threshold (32 MB)
PAGES = BLOCK // 4096

CHILD = f"""
import ctypes, resource, sys
from mtl.cli.host_memory import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc({BLOCK})
    ctypes.memset(block, 1, {BLOCK})
    libc.free(ctypes.c_void_p(block))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, *faults)
"""

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="mallopt thresholds are glibc's",
)


def child(mode: str, **env: str) -> tuple[bool, list[int]]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    kept, *faults = done.stdout.split()
    return kept == "True", [int(f) for f in faults]


@glibc
@pytest.mark.slow  # a fresh process of its own counts its page faults
def test_a_freed_block_is_reused_without_faulting_its_pages_in_again():
    kept, faults = child("keep")
    assert kept
    assert faults[0] > PAGES // 2  # the first use touches fresh pages
    assert all(f < PAGES // 20 for f in faults[1:]), faults  # later ones reuse them


@glibc
@pytest.mark.slow  # a fresh process of its own counts its page faults
def test_without_it_every_use_faults_the_block_in_again():
    kept, faults = child("default")
    assert not kept
    assert all(f > PAGES // 2 for f in faults), faults


@glibc
@pytest.mark.slow  # a fresh process of its own counts its page faults
def test_a_users_own_malloc_setting_is_left_alone():
    kept, faults = child("keep", MALLOC_TRIM_THRESHOLD_="0")
    assert not kept
    assert all(f > PAGES // 2 for f in faults), faults


@pytest.mark.parametrize(("override", "calls"), [([], 1), (["trainer.keep_freed_memory=false"], 0)])
def test_a_training_run_keeps_freed_memory_unless_told_not_to(
    make_cfg, monkeypatch, override, calls
):
    called = []
    monkeypatch.setattr(mtl.cli.job, "keep_freed_memory", lambda: called.append(1))
    mtl.cli.job.train(make_cfg("trainer.max_steps=1", *override))
    assert len(called) == calls
