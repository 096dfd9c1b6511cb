"""``python -m tickwork.services.compose``: the ``tickwork`` command."""

from tickwork.services.compose.commands import main

main()
