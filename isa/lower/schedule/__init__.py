"""When things run and what they cost: layer groups and how they are sliced, the tiling search
and its estimate on the machine's timing core, the search cache, the software pipeline and the
waits the emitter infers."""
