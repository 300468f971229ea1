"""A service whose "weights" are a file mapped into memory (as safetensors loads them), read
whole by each ``forward`` call: fast while the pages are resident, slow when the kernel has
reclaimed them and each is read back from disk (a major page fault).

    python mapped_weights.py FILE [MB]

Writes FILE (MB megabytes, default 32, random bytes) unless it has that size, flushes it to
disk, maps it, prints "serving" and calls ``forward`` every 5 ms until killed.
"""

from __future__ import annotations

import mmap
import os
import sys
import time


def _ensure(path: str, size: int) -> None:
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())  # written back: clean pages, which the kernel can drop


def forward(weights: memoryview) -> int:
    """One byte of every page: every page of the weights is needed."""
    return sum(weights[::4096])


def main() -> None:
    path = sys.argv[1]
    size = (int(sys.argv[2]) if len(sys.argv) > 2 else 32) << 20
    _ensure(path, size)
    with open(path, "rb") as f:
        weights = memoryview(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
    forward(weights)
    print("serving", flush=True)
    while True:
        forward(weights)
        time.sleep(0.005)


if __name__ == "__main__":
    main()
