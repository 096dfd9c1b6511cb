"""Project secrets in the store: set is an upsert, listing shows names only, delete, and the
ciphertexts a task message carries; values are encrypted under TICKWORK_SECRET_KEY."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine, select

from tickwork.shared.errors import InvalidInput, NotFound
from tickwork.shared.secrets import (
    Masker,
    SecretBox,
    SecretKeyError,
    fill_secrets,
    replace_secret_references,
)
from tickwork.shared.store import secrets as secret_store
from tickwork.shared.store.projects import ensure_project
from tickwork.shared.store.tables import secrets

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
BOX = SecretBox(Fernet.generate_key().decode())


@pytest.fixture
def project_id(engine: Engine) -> int:
    with engine.begin() as conn:
        return ensure_project(conn, "etl", NOW)


class TestStore:
    def test_set_twice_keeps_one_row_with_the_last_value(
        self, engine: Engine, project_id: int
    ) -> None:
        with engine.begin() as conn:
            assert secret_store.set_secret(conn, "etl", "token", BOX.encrypt("one"), NOW)
            later = NOW + timedelta(minutes=5)
            assert not secret_store.set_secret(conn, "etl", "token", BOX.encrypt("two"), later)
        with engine.connect() as conn:
            stored = secret_store.read_encrypted_secrets(conn, project_id)
            (info,) = secret_store.list_secrets(conn, "etl")
        assert BOX.decrypt(stored["token"]) == "two"
        assert (info.name, info.updated_at > info.created_at) == ("token", True)

    def test_the_value_is_stored_encrypted(self, engine: Engine, project_id: int) -> None:
        with engine.begin() as conn:
            secret_store.set_secret(conn, "etl", "pw", BOX.encrypt("hunter2"), NOW)
            raw = conn.execute(select(secrets.c.value_encrypted)).scalar_one()
        assert "hunter2" not in raw

    def test_list_names_them_in_order_without_values(self, engine: Engine, project_id: int) -> None:
        with engine.begin() as conn:
            for name in ("b", "a.x", "c-1"):
                secret_store.set_secret(conn, "etl", name, BOX.encrypt("v"), NOW)
            names = [s.name for s in secret_store.list_secrets(conn, "etl")]
        assert names == ["a.x", "b", "c-1"]

    def test_delete_removes_it_and_a_second_delete_is_not_found(
        self, engine: Engine, project_id: int
    ) -> None:
        with engine.begin() as conn:
            secret_store.set_secret(conn, "etl", "token", BOX.encrypt("v"), NOW)
            secret_store.delete_secret(conn, "etl", "token")
            assert secret_store.list_secrets(conn, "etl") == []
            with pytest.raises(NotFound, match="has no secret 'token'"):
                secret_store.delete_secret(conn, "etl", "token")

    def test_an_unknown_project_is_not_found_unless_created(self, engine: Engine) -> None:
        with engine.begin() as conn:
            with pytest.raises(NotFound, match="project 'nope' does not exist"):
                secret_store.set_secret(conn, "nope", "k", BOX.encrypt("v"), NOW)
            secret_store.set_secret(conn, "nope", "k", BOX.encrypt("v"), NOW, create_project=True)
            assert [s.name for s in secret_store.list_secrets(conn, "nope")] == ["k"]

    @pytest.mark.parametrize("name", ["", "a b", "x/y", "é", "a" * 256])
    def test_a_bad_name_changes_nothing(self, engine: Engine, project_id: int, name: str) -> None:
        with engine.begin() as conn:
            with pytest.raises(InvalidInput, match="is not a secret name"):
                secret_store.set_secret(conn, "etl", name, BOX.encrypt("v"), NOW)
            assert secret_store.list_secrets(conn, "etl") == []


class TestKey:
    def test_a_missing_key_names_the_variable(self) -> None:
        with pytest.raises(SecretKeyError, match="TICKWORK_SECRET_KEY is not set"):
            SecretBox.from_environment({})

    def test_a_short_passphrase_is_refused(self) -> None:
        with pytest.raises(SecretKeyError, match="at least 16 characters"):
            SecretBox.from_environment({"TICKWORK_SECRET_KEY": "short"})

    def test_a_passphrase_gives_the_same_key_every_time(self) -> None:
        phrase = {"TICKWORK_SECRET_KEY": "correct horse battery staple"}
        text = SecretBox.from_environment(phrase).encrypt("v")
        assert SecretBox(phrase["TICKWORK_SECRET_KEY"]).decrypt(text) == "v"

    def test_another_key_cannot_decrypt_and_says_so(self) -> None:
        other = SecretBox(Fernet.generate_key().decode())
        with pytest.raises(SecretKeyError, match=r"cannot decrypt secret 'pw'.*another"):
            other.decrypt(BOX.encrypt("v"), "pw")


class TestReferences:
    def test_markers_round_trip_to_values(self) -> None:
        marked = replace_secret_references({"cmd": "curl -H 'X: ${secret:token}'"}, "~m~")
        assert marked == {"cmd": "curl -H 'X: ~m~token~m~'"}
        assert fill_secrets(marked, "~m~", {"token": "abc"}) == {"cmd": "curl -H 'X: abc'"}

    def test_the_masker_hides_every_value_longest_first(self) -> None:
        masker = Masker(["abc", "abcdef"])
        assert masker.mask("x abcdef y abc") == "x *** y ***"
        assert masker.mask_value({"k": ["abc"]}) == {"k": ["***"]}
