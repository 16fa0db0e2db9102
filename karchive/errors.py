"""karchive's exception hierarchy.

Every failure karchive reports derives from :class:`KarchiveError`, so callers can catch one type.
The subclasses say which layer refused: the format reader (untrusted bytes), the producer (compile,
specs), the registry (storage, conflicts), the runtime (devices, arguments), the trust layer
(signatures, policies).

Errors carry *fields* a caller can act on, not only a message (the way huggingface_hub's errors carry
``repo_id``): ``ConflictError.existing_digest``, ``NoMatchingVariantError.rejections``,
``ArgumentError.param`` ... Each class declares its fields as annotated class attributes with a
default, so every field exists on every instance; the constructor takes them as keyword arguments and
refuses names the class does not declare (a typo in a raise site fails loudly in tests, not silently
in production). :meth:`KarchiveError.to_json` gives the CLI's ``--json`` error shape.

A field is declared only where the raise sites can fill it: ``tests/test_error_fields.py`` walks every
``XxxError(...)`` in the package and fails when one leaves out a declared field whose default is None
(a field with a real default, such as ``TrustError.reason``, may be left to it). A subclass for which
an inherited field has no meaning names it in ``_omit`` (``KeyFileError`` concerns a key file, not an
archive), so it is neither accepted nor emitted by :meth:`to_json`.

Where a builtin exception is the natural catch-all (a missing file, a bad argument type), the karchive
error also derives from it, so existing ``except FileNotFoundError`` / ``except TypeError`` clauses keep
working.
"""

from __future__ import annotations

from typing import Any, ClassVar


class KarchiveError(Exception):
    """Base class of every error karchive raises on purpose."""

    _field_names: ClassVar[tuple[str, ...]] = ()
    #: Inherited fields that have no meaning for this class (and its subclasses).
    _omit: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if not name.startswith("_") and name not in names:
                    names.append(name)
        omitted = {n for klass in cls.__mro__ for n in getattr(klass, "_omit", ())}
        cls._field_names = tuple(n for n in names if n not in omitted)

    def __init__(self, message: str = "", **fields: Any) -> None:
        unknown = set(fields) - set(self._field_names)
        if unknown:
            raise TypeError(
                f"{type(self).__name__} has no field(s) {sorted(unknown)}; its fields are {list(self._field_names)}"
            )
        super().__init__(message)
        for name, value in fields.items():
            setattr(self, name, value)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return self.message

    @property
    def fields(self) -> dict[str, Any]:
        """The declared fields and their values (defaults included)."""
        return {name: getattr(self, name) for name in self._field_names}

    def to_json(self) -> dict[str, Any]:
        """``{"error": class name, "message": ..., <fields>}`` with values made JSON-safe."""
        return {
            "error": type(self).__name__,
            "message": self.message,
            **{k: _jsonable(v) for k, v in self.fields.items()},
        }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return str(value)


# --- format --------------------------------------------------------------------------------------
class FormatError(KarchiveError):
    """The bytes are not a well-formed karchive archive (truncated, corrupt, hostile). The message names
    the archive; the subclasses carry what a caller can act on."""


class NotAnArchiveError(FormatError):
    """The file does not end with a karchive footer at all (or is not a regular file)."""

    source: str | None = None  # the archive (path or URL) being read


class ArchiveNotFoundError(FormatError, FileNotFoundError):
    """The archive path does not exist (also a ``FileNotFoundError``)."""

    path: str | None = None


class UnsupportedVersionError(FormatError):
    """The archive's format (or launch ABI) major version is newer than this reader knows."""

    found: str | None = None
    supported: str | None = None


class IntegrityError(FormatError):
    """The bytes are not the ones recorded: a digest or size differs (:class:`DigestMismatchError`), a
    member has no digest to check, or the file changed while (or after) it was verified. ``source``
    names the archive (or file)."""

    source: str | None = None


class DigestMismatchError(IntegrityError):
    """A digest, size or identity recorded for the bytes differs from the bytes: ``expected`` is what was
    recorded, ``actual`` what was found."""

    expected: str | None = None
    actual: str | None = None


class UnsafeMemberError(FormatError):
    """A member name or type would escape the target directory or is not a regular file."""

    member: str | None = None


class LimitExceededError(FormatError):
    """Something claims more bytes or members than the reader's limits allow (decompression bombs)."""

    limit: int | None = None
    value: int | None = None


class SchemaError(FormatError):
    """The manifest does not follow the schema."""

    where: str | None = None  # the JSON location, e.g. "variants[3].abi.params[0]"


class UnsupportedLocationError(FormatError, ValueError):
    """An archive location karchive cannot open: an unknown URL protocol or a missing fsspec backend."""

    location: str | None = None


class TargetError(FormatError, ValueError):
    """Unknown or malformed target such as ``cuda:80`` / ``hip:gfx942``.

    A format-level error: targets are parsed wherever archives are read (selection without a GPU) as
    well as where they are built.
    """

    target: str | None = None


class SentinelError(KarchiveError):
    """Packing refused: the input already holds the path sentinel, so restoring would be ambiguous."""


# --- producer ------------------------------------------------------------------------------------
class ProducerError(KarchiveError):
    """Base for build-side failures."""


class SignatureError(ProducerError):
    """A kernel signature string or structure is malformed or does not fit the kernel."""

    kernel: str | None = None
    param: str | None = None


class KernelNotFoundError(ProducerError):
    """``file.py:fn`` or ``package.module:fn`` does not name a Triton kernel."""

    ref: str | None = None
    available: tuple[str, ...] = ()


class CompileError(ProducerError):
    """Triton failed to compile a variant; the message carries the compiler's own text."""

    variant: str | None = None  # the variant's label, e.g. "add_kernel[cuda:90](BLOCK=1024)"; None where the
    # failure is not one variant's: a kernel's sources (unreadable, not sendable to workers), the process's state


class UnsupportedKernelError(ProducerError):
    """The kernel's launch ABI cannot be described (e.g. tensor descriptors), so it is not packed."""

    kernel: str | None = None


class SpecFileError(ProducerError):
    """A build spec file (TOML) is invalid."""

    path: str | None = None


class BuildError(ProducerError):
    """One or more variants of a build failed."""

    failures: tuple[tuple[str, str], ...] = ()  # (variant label, error message)


class CaptureError(ProducerError):
    """JIT capture could not hook into Triton or could not read what it compiled."""


# --- registry ------------------------------------------------------------------------------------
class RegistryError(KarchiveError):
    """Base for publish/pull/cache failures."""

    registry: str | None = None  # the registry URL (redacted), where known


class DamagedRegistryError(RegistryError):
    """A registry document (version record, name or root index, marker, signature index) is not what
    karchive writes: ``where`` names it (the registry's location and the document's path, or the field)."""

    _omit = ("registry",)  # ``where`` already says which registry, as the reader of the document knew it
    where: str | None = None


class RegistryValueError(RegistryError):
    """A value refused before any registry is involved: an archive name, version or reference, a digest or
    key id, a fetch mode, a timeout, ``$KARCHIVE_STORAGE_OPTIONS``. ``value`` is what was given (its repr,
    at most 200 characters)."""

    _omit = ("registry",)
    value: str | None = None


class NotFoundError(RegistryError):
    """A name or version is not in the registry; the message lists what exists. ``version`` is None where
    the name itself is missing; ``name`` and ``version`` are None where the location holds no registry."""

    name: str | None = None
    version: str | None = None
    available: tuple[str, ...] = ()  # names (no name given / unknown name) or versions of ``name``


class ConflictError(RegistryError):
    """An immutable version already exists with different bytes."""

    ref: str | None = None
    existing_digest: str | None = None
    new_digest: str | None = None


class CacheError(RegistryError):
    """The local cache cannot be used: its directory cannot be written (disk full, read-only, foreign-owned),
    or another process held a lock on one of its files past the timeout. ``path`` names the directory or
    the lock; the cache is shared by every registry, so no registry is named."""

    _omit = ("registry",)
    path: str | None = None


class LockfileError(RegistryError):
    """A lockfile is malformed, cannot be written, or cannot pin what is asked (:class:`LockfilePinError`);
    ``lockfile`` names it."""

    _omit = ("registry",)  # a lockfile names its registry inside; the error is about the file
    lockfile: str | None = None


class LockfilePinError(LockfileError):
    """``name`` is not pinned, pinned at another version, or asked for at two versions while locking."""

    name: str | None = None


class LockfileMismatchError(LockfilePinError):
    """The registry serves other bytes than the lockfile pins: ``pinned_digest`` and ``actual_digest``
    are the sha256 (or, when only the index differs, the index digests) that differ."""

    pinned_digest: str | None = None
    actual_digest: str | None = None


class TransferError(RegistryError):
    """A network or storage operation failed after retries. ``url`` is what was asked for, ``attempts`` how
    many tries were made; ``registry`` is None for an archive opened by URL (the format layer's reads,
    one attempt each: fsspec's own retries are not counted)."""

    url: str | None = None
    attempts: int | None = None


# --- runtime -------------------------------------------------------------------------------------
class RuntimeLoadError(KarchiveError):
    """Base for load/launch failures on the consumer side."""


class NoDeviceError(RuntimeLoadError):
    """No GPU, no driver, or no driver bindings (cuda-python / hip-python) are available."""

    backend: str | None = None


class NoMatchingVariantError(RuntimeLoadError):
    """No variant fits the device and the call; the message lists every variant and why it was rejected."""

    kernel: str | None = None
    rejections: tuple[tuple[str, str], ...] = ()  # (variant label, reason)
    param: str | None = None  # a call that omits what selection needs: the parameter or launch option (None:
    # nothing omitted; the variants were tried and ``rejections`` says why each failed, or none was tried)
    values: tuple[str, ...] = ()  # ... and the values the archive holds for it (as repr)


class ServeMissError(NoMatchingVariantError):
    """``karchive.serve(mode="strict")`` met a launch its archives cannot serve (an unknown kernel, a changed
    source, a call no variant fits); Triton was not asked to compile it."""

    call: str | None = None  # the call, every argument described
    archives: tuple[str, ...] = ()  # NAME@VERSION of each archive served from


class KernelNameError(NoMatchingVariantError, KeyError):
    """The archive has no kernel of that name; ``available`` lists the kernels it has."""

    _omit = ("rejections", "param", "values")  # no variant was considered
    available: tuple[str, ...] = ()

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class ArgumentError(RuntimeLoadError, TypeError):
    """A launch argument is wrong: count, dtype, device, alignment, value range. ``kernel`` is the kernel
    called (None: the argument was refused before any kernel was in hand, e.g. a bridge given something
    that is not a kernel or a ``TensorDescriptor`` built, or by a check made alike for every kernel and not
    told which: a stream handle); ``param`` the parameter (or keyword of karchive's own API, or ``grid`` /
    ``stream``) at fault, None when the call as a whole is (too many positional arguments)."""

    kernel: str | None = None
    param: str | None = None


class TuneError(RuntimeLoadError):
    """`karchive tune`: a keys file, a call or the device cannot be tuned as asked (runtime/tuning/tuner.py).
    ``call`` and ``kernel`` name the call at fault; None where the keys file as a whole, the device or the
    tuning environment is (or, for ``kernel``, where the call names no kernel of the archive)."""

    kernel: str | None = None
    call: int | None = None  # index of the call in the keys file


class LaunchError(RuntimeLoadError):
    """A module cannot be loaded or a kernel cannot be launched (the variant needs what the device or
    the backend cannot give, or the driver refused: :class:`DriverError`)."""

    kernel: str | None = None  # the kernel (or its entry point)


class DriverError(LaunchError):
    """A driver call failed: ``call`` names it (``cuModuleLoadData(add_kernel)``), ``code`` is the
    driver's own error code (``CUresult`` / ``hipError_t``), for looking up or branching on."""

    _omit = ("kernel",)  # a driver call is made for a kernel, but the driver wrapper is not told which
    call: str | None = None
    code: int | None = None


class InteropError(RuntimeLoadError):
    """A framework (or its private API at this version) cannot express what the archived kernel needs."""


# --- trust ---------------------------------------------------------------------------------------
class TrustError(KarchiveError):
    """Signing or signature verification failed. ``reason`` is a stable code (spec/SIGNING.md §7)
    a caller can branch on; ``archive`` (``NAME@VERSION``) says what it concerns: None where no archive is
    known (a build-info file or a provenance statement refused before it names one, a missing dependency,
    a manifest without a usable name)."""

    reason: str = "trust-error"
    archive: str | None = None


class KeyFileError(TrustError):
    """A key file cannot be read or is not an Ed25519 key; ``path`` names it."""

    _omit = ("archive",)
    reason: str = "bad-key-file"
    path: str | None = None


class TrustPolicyError(TrustError):
    """A trust policy (TOML) is malformed or cannot be satisfied; ``path`` names the file."""

    _omit = ("archive",)
    reason: str = "bad-policy"
    path: str | None = None


class EnvelopeError(TrustError):
    """A signature sidecar is not a well-formed DSSE envelope; ``path`` names the file."""

    _omit = ("archive",)
    reason: str = "malformed-envelope"
    path: str | None = None


class UntrustedArchiveError(TrustError):
    """The trust policy refuses the archive (unsigned, unknown or revoked key, signature not covering
    these bytes, ...). ``reason`` is the primary cause; ``rejected`` lists every signature that did
    not count as ``{"key_id", "reason", "detail"}``; ``policy_sha256`` identifies the policy."""

    key_id: str | None = None  # the signature's key (or its unverified hint) behind ``reason``; None: unsigned
    rejected: tuple[dict, ...] = ()
    policy_sha256: str | None = None


class PinnedSignerError(UntrustedArchiveError):
    """A lockfile pins signer key ids and the archive is not validly signed by all of them now (or no
    trust policy was given to check them). ``lockfile`` names the file; ``pinned`` and ``found`` are
    key ids."""

    reason: str = "pinned-signer-missing"
    lockfile: str | None = None
    pinned: tuple[str, ...] = ()
    found: tuple[str, ...] = ()


class DowngradeError(TrustError):
    """``NAME@latest`` resolved to a version older than one this cache has already loaded and verified
    under a trust policy (a possible rollback); pass ``allow_downgrade=True`` / ``--allow-downgrade``
    to accept it. ``newest_seen`` and ``resolved`` are the two versions."""

    reason: str = "downgrade"
    registry: str | None = None
    newest_seen: str | None = None
    resolved: str | None = None


class RegistryMetadataError(TrustError):
    """Signed registry metadata (spec/SIGNING.md §11: the snapshot of every name's versions and the
    timestamp that signs it) is missing, malformed, not signed as the policy's ``[registry]`` section
    asks, expired, older than what this cache verified (a rollback), or disagrees with the registry
    (a version withheld, or one it lacks). ``reason`` is the code; ``role`` is ``snapshot`` or
    ``timestamp`` where one document is at fault; ``version`` its version number and ``seen`` the
    highest this cache verified; ``rejected`` lists the signatures that did not count.

    Each field applies to some reasons only, and is None for the others: ``version`` once the document's
    payload was read (not for a malformed or badly signed one), ``seen`` for a rollback, ``expires`` for an
    expired document, ``archive`` (``NAME@VERSION``) where one version is withheld, missing from or
    mismatched with the snapshot. ``registry`` and ``policy_sha256`` are always set by a load
    (``metadata_store.load_trusted`` adds them to the document layer's errors); None only where a
    writer refuses before any registry is read."""

    reason: str = "metadata-malformed"
    registry: str | None = None
    role: str | None = None
    version: int | None = None
    seen: int | None = None
    expires: str | None = None
    rejected: tuple[dict, ...] = ()
    policy_sha256: str | None = None


# --- where karchive writes ------------------------------------------------------------------------
class DestinationError(KarchiveError, OSError):
    """A file or directory karchive was asked to write cannot be written there: a directory where a
    file is wanted (or the reverse), a parent that cannot be created, no permission, a failed write.
    Commands check their destination before the work that produces it. Also an ``OSError``."""

    path: str | None = None  # the destination the user named (never an internal temporary file)


# --- settings --------------------------------------------------------------------------------------
class SettingsError(KarchiveError, ValueError):
    """A ``KARCHIVE_*`` environment variable holds a value karchive refuses (docs/settings.md): set but
    empty where that would switch a check off, not a usable number, not one of its choices. Also a
    ``ValueError``."""

    variable: str | None = None  # the variable's name
