"""``python -m services.compose``: the ``tickwork`` command."""

from services.compose.commands import main

main()
