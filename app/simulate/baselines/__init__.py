"""Models of the queues teams would use instead of gpuq, one module each.

``kueue`` (:mod:`.kueue`), ``volcano`` (:mod:`.volcano`) and ``slurm``
(:mod:`.slurm`) are simulator-only policies: each is a callable
``Snapshot -> CycleResult`` (the same interface as the live core), built
fresh for every run because Slurm keeps decayed usage between cycles.
What they share (placing a whole job on one GPU type, counting cards) is in
:mod:`.common`. Each module's docstring cites what it was modelled from and
says what it leaves out.
"""
