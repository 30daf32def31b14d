"""componentize-py entry point: pre-initialised at build time, then snapshotted.

Everything imported here (the whole usable stdlib, via `sandpy_guest.preload`) is part of
the component's memory image; at run time the guest has no filesystem to import from.
"""

from sandpy_guest import preload as _preload  # noqa: F401  (pre-imports the stdlib)
from sandpy_guest import packages as _packages  # noqa: F401  (pre-imports bundled packages)
from sandpy_guest import heap as _heap
from sandpy_guest.runner import execute

import gc
import importlib
import linecache
import sys

import wit_world
from wit_world.imports.types import Outcome, RunOptions, Task

# What the imports cached of the build machine's folders goes: the path finders' listings
# and modification times, importlib.metadata's lookups, linecache's lines. They would
# differ from one build (and clone) to the next, and no run imports from those folders.
importlib.invalidate_caches()
sys.path_importer_cache.clear()
linecache.clearcache()

# Everything alive now is part of the snapshot that every run shares copy-on-write. Move
# it out of the collector's sight: otherwise each run's collections would walk (and
# write to) the whole snapshot heap, faulting in private copies of its pages.
gc.collect()
# Then take the allocator's scattered free blocks, so that a run's new objects share a
# few fresh pages instead of landing on a hundred old ones (`sandpy_guest.heap`).
_heap.fill_free_chunks()
gc.freeze()


class WitWorld(wit_world.WitWorld):
    def execute(self, task: Task, options: RunOptions) -> Outcome:
        return execute(task, options)
