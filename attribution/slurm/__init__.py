"""Talking to Slurm: one backend interface, a command-line backend and an optional pyslurm one.

- ``backend``: the interface every backend implements (``JobRef``, ``SlurmBackend``,
  ``NotReady``, ``FINAL_STATES``);
- ``cli``: the backend that runs sacct, scontrol and sacctmgr (the only module here that
  starts processes);
- ``pyslurm_backend``: the optional pyslurm backend, used when its version matches Slurm's;
- ``factory``: ``make_backend(settings)`` picks one;
- ``parse``, ``resolve``: turning Slurm's output into a ``JobRecord``;
- ``hookenv``: the EpilogSlurmctld spool entry; ``admincomment``: our AdminComment line.

Import from the submodules; this package module imports nothing, so no submodule depends on
another through it.
"""
