"""Lay out the snapshot's heap so that a run's new objects share few pages.

Every run starts from the pre-initialised snapshot, and every page a run writes is a page
the host copies back when the run ends (and, for a one-shot process, a copy-on-write fault
while it runs). This CPython allocates objects with wasi-libc's `malloc` (dlmalloc), which
hands out freed chunks before new memory: after the stdlib's imports those are scattered
all over the heap, and 300 new floats landed on 118 different pages. `fill_free_chunks`
takes every free chunk at build time and keeps it, so that a run's objects are carved
side by side from the top of the heap (the same 300 floats: 36 pages, the runner's own
set-up freeing a few chunks before the program runs). Not in every build: see the probe.
"""

import sys

# Request sizes, largest first: each one takes the free chunks it fits (splitting larger
# ones) until an allocation comes from the top of the heap; the next, smaller one then
# takes what is left. Bare objects (dlmalloc's smallest chunk) come last.
_SIZES = (65536, 16384, 4096, 1024, 256, 128, 64, 48, 32, 24)
# A bound on the snapshot's growth (a heap like the snapshot's has ~0.5 MiB free).
_MAX_BYTES = 8 << 20

# The taken chunks, kept for the life of the snapshot. Made at its full length up front:
# a list that grew as it filled would free its old arrays, making new holes.
_fillers: list[object] = []
_CAPACITY = 32768


def fill_free_chunks() -> int:
    """Take the heap's free chunks; returns the bytes taken. Build time only: run it after
    the last collection, just before freezing."""
    empty_bytes = sys.getsizeof(b"")  # a bytes object of length n takes this plus n
    lengths = [size - empty_bytes for size in _SIZES]
    _fillers[:] = [None] * _CAPACITY
    # Assumed to come from the top of the heap (no free chunk this large). Where one is
    # (the clean-clone CI build, docs/dev/performance.md), `top` is too low, every size
    # stops at its first block above it and the filling ends early.
    probe = bytes(1 << 20)
    top = id(probe)
    del probe  # back into the top
    taken = count = 0

    def keep(block: object) -> bool:
        """Keep `block`; whether it came from the top (its size is then the last)."""
        nonlocal count
        if count < _CAPACITY:
            _fillers[count] = block
        else:
            _fillers.append(block)
        count += 1
        return id(block) >= top

    for length in lengths:
        while taken < _MAX_BYTES:
            taken += length + empty_bytes
            if keep(bytes(length)):
                break
    while taken < _MAX_BYTES:
        taken += 16
        if keep(object()):
            break
    return taken
