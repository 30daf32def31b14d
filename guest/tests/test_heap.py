"""Tests of sandpy_guest.heap, run inside the sandbox (on the snapshot's heap)."""

from sandpy_guest import heap


def test_the_snapshot_kept_the_free_chunks_it_took() -> None:
    taken = [block for block in heap._fillers if block is not None]
    assert len(taken) > 100, len(taken)


def test_new_objects_come_from_the_top_of_the_heap_side_by_side() -> None:
    # The last chunk taken at build time came from the top of the heap: what a run makes
    # is carved above it, side by side, but for the chunks the run's own set-up freed.
    # (On the heap as the stdlib's imports left it, 300 new floats landed on 90-118 pages.)
    top = max(id(block) for block in heap._fillers if block is not None)
    floats = [float(i) + 0.5 for i in range(300)]
    above = [value for value in floats if id(value) > top]
    assert len(above) >= 200, len(above)
    pages = {id(value) >> 12 for value in above}
    assert len(pages) <= 30, len(pages)
