"""``python -m tickwork.services.api``: the same as ``tickwork api``."""

from tickwork.services.api.command import api_command

if __name__ == "__main__":
    api_command()
