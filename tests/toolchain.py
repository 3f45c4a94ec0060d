"""A compiler or emulator that is on PATH *and works*: tools/test_wheel.sh puts stubs that exit
127 in front of every compiler name to prove the wheel needs none, so `shutil.which` alone would
send the tests that build C (the aarch64 harnesses, the nvcc check) into those stubs."""
from __future__ import annotations

import shutil
import subprocess
from typing import Optional


def working(name: str) -> Optional[str]:
    """The path of `name` when it runs (`name --version` exits 0), else None."""
    path = shutil.which(name)
    if path is None:
        return None
    try:
        done = subprocess.run([path, "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if done.returncode == 0 else None
