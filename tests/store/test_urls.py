"""A database or Redis URL is printed with its password masked, and an unparsable one not
at all."""

from __future__ import annotations

import pytest

from tickwork.shared.store.urls import printable_url


@pytest.mark.parametrize(
    ("url", "printed"),
    [
        (
            "postgresql://tickwork:hunter2@db:5432/tickwork",
            "postgresql://tickwork:***@db:5432/tickwork",
        ),
        ("redis://:hunter2@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("sqlite:///state/tickwork.db", "sqlite:///state/tickwork.db"),
        ("not a url hunter2", "<unparsable URL>"),
    ],
    ids=["postgres", "redis", "sqlite-without-password", "unparsable"],
)
def test_a_url_is_printed_without_its_password(url: str, printed: str) -> None:
    assert printable_url(url) == printed
