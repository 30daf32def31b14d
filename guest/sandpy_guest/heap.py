"""Lay out the snapshot's heap so that a run's new objects share few pages.

Every run starts from the pre-initialised snapshot, and every page a run writes is a page
the host copies back when the run ends (and, for a one-shot process, a copy-on-write fault
while it runs). This CPython allocates objects with wasi-libc's `malloc` (dlmalloc), which
hands out freed chunks before carving new ones: after the stdlib's imports those are
scattered all over the heap, and 300 new floats landed on 100-180 different pages.
`fill_free_chunks` takes every small free chunk at build time and keeps it, so that a
run's objects are carved side by side from one large free region instead.

It needs no address of the heap's top (an earlier version probed for it, and in some
builds the probe landed in a large free chunk in the middle of the heap, so the filling
stopped early): dlmalloc serves a request from the smallest free chunk that fits (for
small sizes: an exactly fitting one, then its last split remainder), so taking blocks of
one size until they come out side by side over `_SPAN` bytes takes every chunk of that
size class smaller than the region they then come from. Those last, adjacent blocks are
given back (they merge into the region again).
"""

import sys

# dlmalloc in wasm32: a chunk is the request plus 4 bytes, rounded up to 16 (at least 16).
_ALIGN = 16
_OVERHEAD = 4
# Requests of chunk sizes from the tree bins (the smallest chunk at least this large is
# used), largest first, then every small-bin size (exact fits) from 240 down to 32 bytes;
# bare objects (16-byte chunks) come last.
_TREE_CHUNKS = (65536, 16384, 4096, 1024, 256)
_SMALL_CHUNKS = tuple(range(240, 31, -_ALIGN))
# Blocks coming out side by side over this many bytes come from a region left alone.
_SPAN = 64 << 10
# Bounds on the snapshot's growth (a heap like the snapshot's has ~0.5 MiB in small
# free chunks, ~13,000 of them).
_MAX_BYTES = 8 << 20
_CAPACITY = 32768

# The taken chunks, kept for the life of the snapshot. Made at its full length up front:
# a list that grew as it filled would free its old arrays, making new holes.
_fillers: list[object] = []


def chunk_size(request: int) -> int:
    """The size of the dlmalloc chunk that serves a request of `request` bytes."""
    return max(_ALIGN, -(-(request + _OVERHEAD) // _ALIGN) * _ALIGN)


def fill_free_chunks() -> int:
    """Take the heap's small free chunks; returns the bytes kept. Build time only: run it
    after the last collection, just before freezing."""
    empty_bytes = sys.getsizeof(b"")  # a bytes object of length n requests this plus n
    makers = [
        (lambda length=chunk - _OVERHEAD - empty_bytes: bytes(length), chunk)
        for chunk in _TREE_CHUNKS + _SMALL_CHUNKS
    ]
    makers.append((object, chunk_size(sys.getsizeof(object()))))
    _fillers[:] = [None] * _CAPACITY
    count = taken = 0
    for make, stride in makers:
        adjacent = 0  # how many of the last blocks lie side by side
        previous = -1
        block = None
        while taken < _MAX_BYTES and count < _CAPACITY:
            block = make()
            address = id(block)
            adjacent = adjacent + 1 if address - previous == stride else 1
            previous = address
            _fillers[count] = block
            count += 1
            taken += stride
            if adjacent >= 2 and adjacent * stride >= _SPAN:
                break
        del block
        # The adjacent blocks came from a large region: give them back to it.
        for index in range(count - adjacent, count):
            _fillers[index] = None
        count -= adjacent
        taken -= adjacent * stride
    return taken
