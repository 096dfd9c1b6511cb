"""``python -m services.cli``: the ``tickwork`` command."""

from services.cli import main

main()
