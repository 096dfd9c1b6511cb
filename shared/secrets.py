"""Project secrets: their encryption at rest, their names, and ``${secret:name}`` references.

Values are encrypted with Fernet (AES-128-CBC with HMAC-SHA256) under a key taken from
``TICKWORK_SECRET_KEY``: either a Fernet key (``Fernet.generate_key()``, 44 characters of
URL-safe base64) or any passphrase of 16 characters or more, which PBKDF2-HMAC-SHA256
turns into one. The API and the CLI encrypt on ``set``; the store and the executor only
move the ciphertext; the agent decrypts just before a task runs. A task message therefore
carries ciphertexts, never a clear value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from tickwork.shared.domain.operators import operators_with_secret_commands, secret_params
from tickwork.shared.errors import InvalidInput, Problem, TickworkError

SECRET_KEY_VARIABLE = "TICKWORK_SECRET_KEY"
SECRET_NAME = re.compile(r"\A[A-Za-z0-9_.-]{1,255}\Z")
SECRET_REFERENCE = re.compile(r"\$\{\s*secret:([^}]*?)\s*\}")
"""``${secret:name}`` in a template (the name is checked against :data:`SECRET_NAME`)."""
MASK = "***"
MAX_SECRET_BYTES = 64 * 1024
MIN_PASSPHRASE_CHARS = 16
_KDF_SALT = b"tickwork-secrets-v1"  # fixed: the key must be derivable again from the phrase
_KDF_ITERATIONS = 200_000
SECRET_PARAMS: dict[str, tuple[str, ...]] = secret_params()
"""The params of an operator where ``${secret:name}`` may stand, besides ``sh>`` commands
and ``_env`` values."""
WHERE_ALLOWED = (
    "secrets may be used only in "
    + ", ".join(f"{name}>" for name in operators_with_secret_commands())
    + " commands, _env and "
    + "; ".join(
        f"{operator}> {', '.join(params)}" for operator, params in sorted(SECRET_PARAMS.items())
    )
)
"""Where a secret may stand, as an error says it (from the operator registry)."""


class SecretKeyError(TickworkError):
    """Raised when ``TICKWORK_SECRET_KEY`` is missing or unusable, or a ciphertext was made
    under another key."""


class SecretBox:
    """Encrypts and decrypts secret values under one key."""

    def __init__(self, key: str) -> None:
        self._fernet = Fernet(_fernet_key(key))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SecretBox:
        """The box of ``TICKWORK_SECRET_KEY``; SecretKeyError naming it when unset."""
        key = (os.environ if environ is None else environ).get(SECRET_KEY_VARIABLE, "")
        if not key.strip():
            raise SecretKeyError(
                f"{SECRET_KEY_VARIABLE} is not set: secrets need it to be encrypted and read "
                "(a Fernet key, or a passphrase of 16 characters or more)"
            )
        return _box_of(key.strip())

    def encrypt(self, value: str) -> str:
        """The ciphertext of ``value``, as text."""
        return self._fernet.encrypt(value.encode("utf-8")).decode("ascii")

    def decrypt(self, ciphertext: str, name: str = "") -> str:
        """The value of ``ciphertext``; SecretKeyError when it was not made under this key."""
        try:
            return self._fernet.decrypt(ciphertext.encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError, ValueError):
            what = f"secret {name!r}" if name else "a secret"
            raise SecretKeyError(
                f"cannot decrypt {what}: it was stored under another {SECRET_KEY_VARIABLE}"
            ) from None


@lru_cache(maxsize=8)
def _box_of(key: str) -> SecretBox:
    return SecretBox(key)


def _fernet_key(key: str) -> bytes:
    """A Fernet key as it is, or one derived from a passphrase."""
    try:
        if len(base64.urlsafe_b64decode(key.encode("ascii"))) == 32 and len(key) == 44:
            return key.encode("ascii")
    except (binascii.Error, ValueError, UnicodeError):
        pass
    if len(key) < MIN_PASSPHRASE_CHARS:
        raise SecretKeyError(
            f"{SECRET_KEY_VARIABLE} must be a Fernet key or a passphrase of at least "
            f"{MIN_PASSPHRASE_CHARS} characters"
        )
    derived = hashlib.pbkdf2_hmac("sha256", key.encode("utf-8"), _KDF_SALT, _KDF_ITERATIONS)
    return base64.urlsafe_b64encode(derived)


def check_secret_name(name: str) -> None:
    """InvalidInput (field ``name``) unless ``name`` is 1-255 letters, digits, ``_``,
    ``.`` or ``-``."""
    if not SECRET_NAME.fullmatch(name):
        message = f"{name!r} is not a secret name: 1-255 letters, digits, '_', '.' or '-'"
        raise InvalidInput([Problem("name", None, message)])


def secret_references(value: Any) -> set[str]:
    """The names of every ``${secret:name}`` in ``value`` (strings, mappings, lists)."""
    if isinstance(value, str):
        return (
            {m.group(1) for m in SECRET_REFERENCE.finditer(value)} if "secret" in value else set()
        )
    if isinstance(value, Mapping):
        return set().union(*(secret_references(item) for item in value.values()))
    if isinstance(value, list | tuple):
        return set().union(*(secret_references(item) for item in value))
    return set()


def without_secret_references(text: str) -> str:
    """``text`` with each ``${secret:name}`` removed (what is left is an ordinary template)."""
    return SECRET_REFERENCE.sub("", text)


def replace_secret_references(value: Any, marker: str) -> Any:
    """``value`` with each ``${secret:name}`` turned into ``<marker>name<marker>``: text the
    template language leaves alone, which the agent replaces with the value."""
    if isinstance(value, str):
        return SECRET_REFERENCE.sub(lambda m: f"{marker}{m.group(1)}{marker}", value)
    if isinstance(value, Mapping):
        return {key: replace_secret_references(item, marker) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [replace_secret_references(item, marker) for item in value]
    return value


def marked_secrets(marker: str) -> re.Pattern[str]:
    """What :func:`replace_secret_references` left of a ``${secret:name}``: the name
    between two ``marker``; group 1 is the name."""
    return re.compile(re.escape(marker) + r"([A-Za-z0-9_.-]{1,255})" + re.escape(marker))


def fill_secrets(value: Any, marker: str, values: Mapping[str, str]) -> Any:
    """Inverse of :func:`replace_secret_references`: markers become the secrets' values."""
    if not marker:
        return value
    if isinstance(value, str):
        if marker not in value:
            return value
        return marked_secrets(marker).sub(lambda m: values.get(m.group(1), MASK), value)
    if isinstance(value, Mapping):
        return {key: fill_secrets(item, marker, values) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [fill_secrets(item, marker, values) for item in value]
    return value


class Masker:
    """Replaces every secret value in text by ``***`` (longest values first)."""

    def __init__(self, values: Iterable[str]) -> None:
        unique = sorted({v for v in values if v}, key=len, reverse=True)
        self.longest = len(unique[0]) if unique else 0
        self._pattern = re.compile("|".join(re.escape(v) for v in unique)) if unique else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def mask(self, text: str) -> str:
        """``text`` without any secret value in it."""
        return text if self._pattern is None else self._pattern.sub(MASK, text)

    def mask_value(self, value: Any) -> Any:
        """``mask`` applied to every string inside ``value`` (mappings, lists; keys too)."""
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, Mapping):
            return {self.mask(str(k)): self.mask_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.mask_value(item) for item in value]
        return value
