"""Choosing the Slurm backend a configuration asks for (the command line or pyslurm)."""

from __future__ import annotations

from attribution.config import SlurmSettings
from attribution.errors import SlurmError
from attribution.slurm.backend import SlurmBackend
from attribution.slurm.cli import CliBackend
from attribution.slurm.pyslurm_backend import PyslurmBackend, pyslurm_usable


def make_backend(settings: SlurmSettings, *, timezone: str = "UTC") -> SlurmBackend:
    """The backend the configuration asks for (see the module docstring).

    Raises:
        SlurmError: ``backend: pyslurm`` was asked for but cannot be used.
    """
    cli = CliBackend(
        timeout=settings.timeout,
        retries=settings.retries,
        bin_dir=settings.bin_dir,
        timezone=timezone,
    )
    if settings.backend == "cli":
        return cli
    usable, why = pyslurm_usable(cli)
    if usable:
        return PyslurmBackend(cli)
    if settings.backend == "pyslurm":
        raise SlurmError(f"backend pyslurm cannot be used: {why}")
    return cli
