"""Ed25519 keys: generate, save and load them, and name them by a key id derived from the public key.

File formats (spec/SIGNING.md §2) are the standard ones, so OpenSSL and other tools read them:
private keys are PKCS#8 PEM (``BEGIN PRIVATE KEY``, or ``BEGIN ENCRYPTED PRIVATE KEY`` with a
passphrase), public keys SubjectPublicKeyInfo PEM (``BEGIN PUBLIC KEY``). A trust policy holds a
public key inline as ``ed25519:<base64 of the 32 raw bytes>``, so the policy alone is the trust root.

The key id is the lowercase hex sha256 of the 32 raw public-key bytes. It is derived, never chosen,
so two names cannot claim one key, and it is only a hint inside an envelope (DSSE's ``keyid`` is
unauthenticated): verification always decides by which public key verifies the signature.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from dataclasses import dataclass

from ..core.fsio import read_regular
from ..core.grammar import whole
from ..errors import KeyFileError, TrustError
from . import reasons

try:  # cryptography is the `trust` extra: fail closed, and say what to install
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
except ImportError as exc:  # pragma: no cover - exercised only on installs without the extra
    raise TrustError(
        "signing and signature verification need the 'cryptography' package: pip install 'karchive[trust]'",
        reason=reasons.MISSING_DEPENDENCY,
        archive=None,
    ) from exc

ALGORITHM = "ed25519"
#: Key files are small; anything larger is not a key (and is not read whole).
MAX_KEY_FILE_BYTES = 64 * 1024
_INLINE = re.compile(r"ed25519:([A-Za-z0-9+/]{43}=)")


def key_id_of(raw_public: bytes) -> str:
    """The key id: hex sha256 of the 32 raw Ed25519 public-key bytes."""
    return hashlib.sha256(raw_public).hexdigest()


def short_id(key_id: str) -> str:
    """The first 16 hex digits, for people; JSON output and policies carry the full id."""
    return key_id[:16]


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key and its derived id."""

    key: Ed25519PublicKey
    raw: bytes

    @classmethod
    def from_raw(cls, raw: bytes, path: str | None = None) -> PublicKey:
        """``path``: the file the bytes were read from, named by the error (None: they came from no file)."""
        if len(raw) != 32:
            raise KeyFileError(f"an Ed25519 public key is 32 bytes, got {len(raw)}", path=path)
        return cls(Ed25519PublicKey.from_public_bytes(raw), raw)

    @property
    def key_id(self) -> str:
        return key_id_of(self.raw)

    def verify(self, signature: bytes, message: bytes) -> bool:
        """True only if ``signature`` is this key's Ed25519 signature of exactly ``message``."""
        try:
            self.key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def inline(self) -> str:
        """The form a trust policy holds: ``ed25519:<base64 of the raw key>``."""
        return f"{ALGORITHM}:{base64.b64encode(self.raw).decode()}"

    def to_pem(self) -> bytes:
        return self.key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key. Ed25519 signatures are deterministic, so signing is reproducible."""

    key: Ed25519PrivateKey

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @property
    def public(self) -> PublicKey:
        return PublicKey.from_raw(self.key.public_key().public_bytes_raw())

    @property
    def key_id(self) -> str:
        return self.public.key_id

    def sign(self, message: bytes) -> bytes:
        return self.key.sign(message)

    def to_pem(self, passphrase: bytes | None = None) -> bytes:
        encryption = serialization.BestAvailableEncryption(passphrase) if passphrase else serialization.NoEncryption()
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def parse_inline_public_key(text: object, where: str = "public key", path: str | None = None) -> PublicKey:
    """``ed25519:<base64>`` (as written by ``karchive keygen`` and held in trust policies). ``path``: the file
    the text was read from (a key file or a trust policy), named by the error; None for text from no file."""
    match = whole(_INLINE, text)
    if not match:
        raise KeyFileError(
            f"{where}: expected 'ed25519:' followed by the base64 of a 32-byte key, got {text!r}", path=path
        )
    return PublicKey.from_raw(base64.b64decode(match.group(1), validate=True), path)


def _read_small(path: str | os.PathLike) -> bytes:
    where = os.fspath(path)
    try:
        data = read_regular(path, MAX_KEY_FILE_BYTES)
    except OSError as exc:
        raise KeyFileError(f"cannot read key file {where}: {exc.strerror or exc}", path=where) from exc
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"{where} is larger than {MAX_KEY_FILE_BYTES} bytes: not a key file", path=where)
    return data


def load_private_key(path: str | os.PathLike, passphrase: bytes | None = None) -> SigningKey:
    """A PKCS#8 PEM Ed25519 private key; ``passphrase`` for an encrypted one."""
    where = os.fspath(path)
    data = _read_small(path)
    if b"PRIVATE KEY-----" not in data:
        hint = " (this is a public key: sign with the private key file)" if b"PUBLIC KEY-----" in data else ""
        raise KeyFileError(f"{where} is not a PEM private key{hint}", path=where)
    try:
        key = serialization.load_pem_private_key(data, password=passphrase or None)
    except TypeError as exc:  # cryptography: encrypted without a password, or a password for a plain key
        need = "is encrypted: give its passphrase" if b"ENCRYPTED" in data else "is not encrypted: give no passphrase"
        raise KeyFileError(f"{where} {need}", path=where) from exc
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(
            f"cannot load private key {where}: wrong passphrase or damaged file ({exc})", path=where
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(
            f"{where} holds a {type(key).__name__.removesuffix('PrivateKey') or 'non'} key; "
            "karchive signs with Ed25519 only (karchive keygen makes one)",
            path=where,
        )
    return SigningKey(key)


def load_public_key(path: str | os.PathLike) -> PublicKey:
    """A SubjectPublicKeyInfo PEM Ed25519 public key, or a file holding the inline ``ed25519:`` form."""
    where = os.fspath(path)
    data = _read_small(path)
    text = data.strip()
    if text.startswith(b"ed25519:"):
        return parse_inline_public_key(text.decode("ascii", "replace"), where, where)
    if b"PRIVATE KEY-----" in data:
        raise KeyFileError(f"{where} is a private key; give the public key (.pub)", path=where)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(f"{where} is not a PEM public key ({exc})", path=where) from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{where} is not an Ed25519 public key", path=where)
    return PublicKey.from_raw(key.public_bytes_raw())


def _create_exclusive(path: str, data: bytes, mode: int) -> None:
    """Write a new file; never overwrite one (a lost private key is worse than an error)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError as exc:
        raise KeyFileError(f"{path} already exists; refusing to overwrite a key file", path=path) from exc
    except OSError as exc:
        raise KeyFileError(f"cannot create {path}: {exc.strerror or exc}", path=path) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        os.unlink(path)
        raise


def save_keypair(
    key: SigningKey, private_path: str | os.PathLike, public_path: str | os.PathLike, passphrase: bytes | None = None
) -> None:
    """Private key with mode 0600, public key 0644; both created exclusively (no overwrite)."""
    priv, pub = os.fspath(private_path), os.fspath(public_path)
    for p in (priv, pub):
        if os.path.lexists(p):
            raise KeyFileError(f"{p} already exists; refusing to overwrite a key file", path=p)
    _create_exclusive(priv, key.to_pem(passphrase), 0o600)
    try:
        _create_exclusive(pub, key.public.to_pem(), 0o644)
    except BaseException:
        os.unlink(priv)
        raise
