"""The API's read model: every read the REST routes and the UI pages show, defined once.

Each module holds functions that take a connection (and the filters a caller gives) and
return typed records, queries and projections together. A REST route serialises those
records; a UI page renders the same records; the CLI renders the REST API's JSON. The UI's
modules build no query of their own (an import contract in pyproject.toml keeps them off
SQLAlchemy and the store's tables).
"""
