"""Pipeline schedules: one entry per schedule, registered by name.

A schedule says, for each pipeline stage, the order in which that stage runs its work items. A
work item is one phase of one micro-batch on one virtual chunk of the stage's layers:

* ``F``: the forward of the chunk for the micro-batch; * ``B``: its backward -- the whole
backward for schedules that do not split   it, the input-gradient part only for those that do
(zero-bubble); * ``W``: the weight-gradient part of the backward (split schedules only).

With ``v`` virtual chunks (interleaved 1F1B), stage ``i`` holds the chunks ``c = 0..v-1`` whose
layers form virtual stage ``c*p + i``; the activation of virtual stage ``k`` goes to virtual
stage ``k+1`` (stage ``(i+1) % p``).

Everything that needs a schedule's order reads it here: the graph builder
(:func:`core.sim.graph.build_pipeline_graph`), the sweep's batch solver
(:func:`core.studies.sweep.pipeline_iteration_times`) and the memory model
(:func:`in_flight_microbatches`). A new schedule is one new class with :func:`register`.
"""
