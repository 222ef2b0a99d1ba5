"""``python -m attribution.cli`` runs ``sattr``."""

from attribution.cli import main

main()
