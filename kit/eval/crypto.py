"""The canary XOR cipher that MM-BrowseComp and MMSearch-Plus publish their questions with.

Both benchmarks ship question / answer text encrypted so that it does not appear as plain text on
the web: the ciphertext is ``base64(plaintext_utf8 XOR key)`` where the key is the SHA-256 digest
of a password, repeated to the message length. MM-BrowseComp uses each row's ``canary`` string as
the password; MMSearch-Plus uses one canary for the whole dataset (the repository name,
``"MMSearch-Plus"``).

Decrypted text must only live in memory: callers never write it to results (see
:mod:`kit.eval.loaders`). Written here (a dozen lines) rather than imported because no maintained
library implements this ad-hoc scheme.
"""

from __future__ import annotations

import base64
import binascii
import hashlib


class DecryptionError(ValueError):
    """A ciphertext that is not valid base64, or that does not decrypt to UTF-8 with this password."""


def derive_key(password: str, length: int) -> bytes:
    """SHA-256 of ``password`` (UTF-8) repeated and truncated to ``length`` bytes."""
    digest = hashlib.sha256(password.encode("utf-8")).digest()
    reps, rest = divmod(length, len(digest))
    return digest * reps + digest[:rest]


def _xor(data: bytes, password: str) -> bytes:
    key = derive_key(password, len(data))
    # int.from_bytes XOR runs in C over the whole buffer: ~50x faster than a per-byte generator.
    n = len(data)
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big") if n else b""


def encrypt_text(plaintext: str, password: str) -> str:
    """``base64(utf8(plaintext) XOR key(password))`` — the publishers' encryption (used by tests and
    by anyone re-packaging data in the published format)."""
    return base64.b64encode(_xor(plaintext.encode("utf-8"), password)).decode("ascii")


def decrypt_text(ciphertext_b64: str, password: str) -> str:
    """Inverse of :func:`encrypt_text`.

    Raises:
        DecryptionError: ``ciphertext_b64`` is not base64, or the result is not UTF-8 (wrong
            password or corrupt field). The message never contains the plaintext.
    """
    if not isinstance(ciphertext_b64, str):
        raise DecryptionError(f"ciphertext must be a base64 string, got {type(ciphertext_b64).__name__}")
    try:
        data = base64.b64decode(ciphertext_b64, validate=True)
    except (binascii.Error, ValueError) as e:
        raise DecryptionError(f"not valid base64 ({len(ciphertext_b64)} characters): {e}") from e
    try:
        return _xor(data, password).decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecryptionError("decrypted bytes are not UTF-8: wrong canary or corrupt field") from e
