"""attribution: one honest, structured diagnosis for every failed Slurm GPU job."""

__version__ = "0.1.0"
