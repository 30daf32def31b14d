"""Tests of sandpy_guest.heap, run inside the sandbox (on the snapshot's heap)."""

from sandpy_guest import heap


# Where a run's new objects land depends on what the run's own set-up frees first (in one
# clean-clone CI run 300 new floats all filled such chunks), so it is measured by
# `sandpy bench --only hello` (written pages per slot), not asserted here.
def test_the_snapshot_kept_the_free_chunks_it_took() -> None:
    taken = [block for block in heap._fillers if block is not None]
    assert len(taken) > 100, len(taken)
