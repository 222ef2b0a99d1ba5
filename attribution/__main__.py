"""`python -m attribution` runs the `sattr` command line."""

from attribution.cli import main

main()
