"""What composes the services: the ``tickwork`` root command and the commands that run
services or work on their database, from the same parts.

- ``tickwork run`` / ``check``: one workflow in this process (:mod:`.run`, :mod:`.embedded`);
- ``tickwork standalone``: the API, scheduler, executor and agents in one process
  (:mod:`.standalone`), with the in-process dispatchers of :mod:`.dispatchers`;
- ``tickwork dev``: each service as a local process (:mod:`.dev`);
- ``tickwork scheduler|executor|agent``: one service per process (:mod:`.serve`;
  ``tickwork api`` is services/api/command.py);
- ``tickwork db``: the store's schema, retention and log import (:mod:`.db`).

Nothing below imports this package: it sits above the services and the client.
"""
