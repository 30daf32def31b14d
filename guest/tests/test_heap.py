"""Tests of sandpy_guest.heap, run inside the sandbox (on the snapshot's heap)."""

from sandpy_guest import heap


def test_the_snapshot_kept_the_free_chunks_it_took() -> None:
    taken = [block for block in heap._fillers if block is not None]
    assert len(taken) > 100, len(taken)


def test_new_objects_share_few_pages() -> None:
    # Three hundred floats are 4,800 bytes: two pages side by side. On the heap as the
    # stdlib's imports left it they landed on 118 pages, 36 with the free chunks taken
    # (the run's own set-up frees a few chunks before this code runs).
    floats = [float(i) + 0.5 for i in range(300)]
    pages = {id(value) >> 12 for value in floats}
    assert len(pages) <= 60, len(pages)
