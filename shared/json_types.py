"""The type of a JSON object as the API sends it and its clients read it."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]
"""A JSON object: member names to values (``json.loads`` of an object)."""
