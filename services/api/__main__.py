"""``python -m services.api``: the same as ``tickwork api``."""

from services.api.command import api_command

if __name__ == "__main__":
    api_command()
