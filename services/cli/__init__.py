"""The API's client: the ``tickwork`` commands that ask the API only (push, sessions,
attempts, logs, schedules, secrets, ...), their HTTP client and output, and the command-line
machinery every command shares (the lazy root group, exit statuses, ``--param`` parsing).

The root ``tickwork`` group that lists every command is :mod:`tickwork.services.compose.commands`.
"""
