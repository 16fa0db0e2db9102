"""karchive's exception hierarchy.

Every failure karchive reports derives from :class:`KarchiveError`, so callers can catch one type.
The subclasses say which layer refused: the format reader (untrusted bytes), the producer (compile,
specs), the registry (storage, conflicts), the runtime (devices, arguments).
"""

from __future__ import annotations


class KarchiveError(Exception):
    """Base class of every error karchive raises on purpose."""


# --- format --------------------------------------------------------------------------------------
class FormatError(KarchiveError):
    """The bytes are not a well-formed karchive archive (truncated, corrupt, hostile)."""


class NotAnArchiveError(FormatError):
    """The file does not end with a karchive footer at all."""


class UnsupportedVersionError(FormatError):
    """The archive's format (or launch ABI) major version is newer than this reader knows."""


class IntegrityError(FormatError):
    """A digest or size recorded in the archive does not match the bytes."""


class UnsafeMemberError(FormatError):
    """A member name or type would escape the target directory or is not a regular file."""


class LimitExceededError(FormatError):
    """Something claims more bytes or members than the reader's limits allow (decompression bombs)."""


class SchemaError(FormatError):
    """The manifest does not follow the schema."""


class SentinelError(KarchiveError):
    """Packing refused: the input already holds the path sentinel, so restoring would be ambiguous."""


# --- producer ------------------------------------------------------------------------------------
class ProducerError(KarchiveError):
    """Base for build-side failures."""


class TargetError(ProducerError):
    """Unknown or malformed target such as ``cuda:80`` / ``hip:gfx942``."""


class SignatureError(ProducerError):
    """A kernel signature string or structure is malformed or does not fit the kernel."""


class KernelNotFoundError(ProducerError):
    """``file.py:fn`` or ``package.module:fn`` does not name a Triton kernel."""


class CompileError(ProducerError):
    """Triton failed to compile a variant; the message carries the compiler's own text."""


class UnsupportedKernelError(ProducerError):
    """The kernel's launch ABI cannot be described (e.g. tensor descriptors), so it is not packed."""


class SpecFileError(ProducerError):
    """A build spec file (TOML) is invalid."""


class BuildError(ProducerError):
    """One or more variants of a build failed."""


class CaptureError(ProducerError):
    """JIT capture could not hook into Triton or could not read what it compiled."""


# --- registry ------------------------------------------------------------------------------------
class RegistryError(KarchiveError):
    """Base for publish/pull/cache failures."""


class NotFoundError(RegistryError):
    """A name or version is not in the registry; the message lists what exists."""


class ConflictError(RegistryError):
    """An immutable version already exists with different bytes."""


class LockfileError(RegistryError):
    """A lockfile is malformed or an archive's digest differs from the pinned one."""


class TransferError(RegistryError):
    """A network or storage operation failed after retries."""


# --- runtime -------------------------------------------------------------------------------------
class RuntimeLoadError(KarchiveError):
    """Base for load/launch failures on the consumer side."""


class NoDeviceError(RuntimeLoadError):
    """No GPU, no driver, or no driver bindings (cuda-python / hip-python) are available."""


class NoMatchingVariantError(RuntimeLoadError):
    """No variant fits the device and the call; the message lists every variant and why it was rejected."""


class ArgumentError(RuntimeLoadError, TypeError):
    """A launch argument is wrong: count, dtype, device, alignment, value range."""


class LaunchError(RuntimeLoadError):
    """The driver refused to load a module or launch a kernel."""


# --- trust ---------------------------------------------------------------------------------------
class TrustError(KarchiveError):
    """Signing or signature verification failed. ``reason`` is a stable code (spec/SIGNING.md §7)
    a caller can branch on; ``archive`` (``NAME@VERSION``) and ``key_id`` say what it concerns."""

    reason: str = "trust-error"

    def __init__(self, message: str, *, reason: str | None = None, archive: str | None = None,
                 key_id: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason
        self.archive = archive
        self.key_id = key_id


class KeyFileError(TrustError):
    """A key file cannot be read or is not an Ed25519 key; ``path`` names it."""

    reason = "bad-key-file"

    def __init__(self, message: str, *, path: str | None = None, key_id: str | None = None) -> None:
        super().__init__(message, key_id=key_id)
        self.path = path


class TrustPolicyError(TrustError):
    """A trust policy (TOML) is malformed or cannot be satisfied; ``path`` names the file."""

    reason = "bad-policy"

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class EnvelopeError(TrustError):
    """A signature sidecar is not a well-formed DSSE envelope; ``path`` names the file."""

    reason = "malformed-envelope"

    def __init__(self, message: str, *, path: str | None = None, archive: str | None = None) -> None:
        super().__init__(message, archive=archive)
        self.path = path


class UntrustedArchiveError(TrustError):
    """The trust policy refuses the archive (unsigned, unknown or revoked key, signature not covering
    these bytes, ...). ``reason`` is the primary cause; ``rejected`` lists every signature that did
    not count as ``{"key_id", "reason", "detail"}``; ``policy_sha256`` identifies the policy."""

    def __init__(self, message: str, *, reason: str, archive: str | None = None, key_id: str | None = None,
                 rejected: tuple[dict, ...] = (), policy_sha256: str | None = None) -> None:
        super().__init__(message, reason=reason, archive=archive, key_id=key_id)
        self.rejected = rejected
        self.policy_sha256 = policy_sha256
