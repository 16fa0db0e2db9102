"""Storage backends for a registry: one small interface, two implementations.

``LocalStore`` works on a directory with plain ``os`` calls, because the atomic primitives it needs
(exclusive ``link``, ``rename``, ``fsync``) are not exposed by fsspec's local filesystem.
``FsspecStore`` covers everything else: ``memory://``, ``s3://`` (s3fs), ``gs://`` (gcsfs), and
read-only ``http(s)://``. Exclusive creation maps to the backend's conditional write
(``If-None-Match: *`` on S3, ``ifGenerationMatch=0`` on GCS) through fsspec's ``mode="create"``.

Every remote call goes through the retry policy; a missing object is ``None``/``False``, never an
exception, and failures surface as :class:`TransferError` or :class:`RegistryError`.
"""

from __future__ import annotations

import abc
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..core.fsio import fsync_dir, read_regular, temp_path_for
from ..errors import RegistryError, TransferError
from .config import redact_url
from .deadline import current as current_deadline
from .retry import RetryPolicy

if TYPE_CHECKING:  # pragma: no cover
    from .records import VersionRecord

ProgressFn = Callable[[int], None]

#: URL schemes karchive resolves itself, before fsspec (which maps ``oci://`` to an unrelated object
#: store): scheme → ``module:class`` under this package, imported on first use (as fsspec's registry).
SCHEMES = {"oci": "oci_store:OciStore"}


class Store(abc.ABC):
    """What a registry needs from storage; paths are '/'-separated and relative to the registry root.

    An abstract base class, as fsspec's ``AbstractFileSystem`` is a protocol with small backends: a
    backend that lacks a method cannot be instantiated, instead of silently answering ``None``.
    Missing objects are ``None``/``False``/``[]`` answers, never exceptions; failures are karchive errors.
    """

    url: str  # redacted, printable
    writable: bool = True
    can_list: bool = True
    is_local: bool = False

    @abc.abstractmethod
    def read(self, path: str) -> bytes | None:
        """The whole object, or None if it does not exist."""

    @abc.abstractmethod
    def size(self, path: str) -> int | None:
        """The object's size, or None if it does not exist."""

    @abc.abstractmethod
    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; raw backend errors propagate (the caller retries)."""

    @abc.abstractmethod
    def create(self, path: str, data: bytes) -> bool:
        """Write ``data`` only if ``path`` does not exist (atomically where the backend can); False if it did."""

    @abc.abstractmethod
    def replace(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path`` whether or not it exists (derived indexes only)."""

    @abc.abstractmethod
    def upload(self, path: str, local: str, progress: ProgressFn) -> bool:
        """Copy a local file to ``path`` unless it exists (False then); ``progress(n)`` per chunk."""

    @abc.abstractmethod
    def list_dir(self, path: str) -> list[str]:
        """Entry names directly under ``path`` (hidden names excluded); [] if there is none."""

    def bind(self, record: VersionRecord) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Say which archive a blob digest belongs to, before its blob or signatures are touched: a backend
        that keeps blobs per archive name (OCI: one repository per name, :mod:`.oci_store`) needs it;
        path-addressed backends ignore it."""

    def _read_only(self) -> RegistryError:
        return RegistryError(
            f"registry {self.url} is read-only (publish to the directory or bucket it serves)", registry=self.url
        )


# -- local directory -------------------------------------------------------------------------------
class LocalStore(Store):
    is_local = True

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = str(self.root)

    def _p(self, path: str) -> Path:
        return self.root / path

    def read(self, path: str) -> bytes | None:
        try:  # a regular file only: a FIFO planted as a record must not hang `ls`
            return read_regular(self._p(path), None)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except IsADirectoryError:
            raise RegistryError(
                f"{self._p(path)} is a directory, expected a file (damaged registry)", registry=self.url
            ) from None
        except PermissionError as exc:
            raise RegistryError(f"cannot read {self._p(path)}: {exc}", registry=self.url) from None
        except OSError as exc:
            raise RegistryError(
                f"cannot read {self._p(path)}: {exc.strerror or exc} (damaged registry)", registry=self.url
            ) from None

    def size(self, path: str) -> int | None:
        try:
            return self._p(path).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_range(self, path: str, start: int, end: int) -> bytes:
        with open(self._p(path), "rb") as fh:
            return os.pread(fh.fileno(), end - start, start)

    def _write_temp(self, final: Path, write: Callable[[Any], None]) -> Path:
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RegistryError(f"cannot create {final.parent}: {exc}", registry=self.url) from None
        tmp = temp_path_for(final)
        try:
            with open(tmp, "xb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise RegistryError(f"cannot write {final}: {exc}", registry=self.url) from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def _link_exclusive(self, tmp: Path, final: Path) -> bool:
        try:
            os.link(tmp, final)
            created = True
        except FileExistsError:
            created = False
        except OSError as exc:
            raise RegistryError(f"cannot create {final}: {exc}", registry=self.url) from None
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(final.parent)
        return created

    def create(self, path: str, data: bytes) -> bool:
        final = self._p(path)
        if final.exists():
            return False
        return self._link_exclusive(self._write_temp(final, lambda fh: fh.write(data)), final)

    def replace(self, path: str, data: bytes) -> None:
        final = self._p(path)
        tmp = self._write_temp(final, lambda fh: fh.write(data))
        try:
            os.replace(tmp, final)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise RegistryError(f"cannot write {final}: {exc}", registry=self.url) from None
        fsync_dir(final.parent)

    def upload(self, path: str, local: str, progress: ProgressFn) -> bool:
        final = self._p(path)
        if final.exists():
            return False

        def copy(fh: Any) -> None:
            with open(local, "rb") as src:
                while chunk := src.read(1 << 20):
                    fh.write(chunk)
                    progress(len(chunk))

        return self._link_exclusive(self._write_temp(final, copy), final)

    def list_dir(self, path: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self._p(path)) if not n.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []


# -- fsspec ---------------------------------------------------------------------------------------
def _progress_callback(progress: ProgressFn) -> Any:
    """An ``fsspec.callbacks.Callback`` (what ``put_file`` reports through) feeding our progress function.

    Built on demand so importing this module does not import fsspec's callbacks.
    """
    from fsspec.callbacks import Callback

    class _Progress(Callback):
        """fsspec updates ``value`` (absolute or relative) and then calls ``call()``: report the delta."""

        reported = 0

        def call(self, *args: Any, **kwargs: Any) -> None:
            if self.value > self.reported:
                progress(self.value - self.reported)
                self.reported = self.value

    return _Progress()


class FsspecStore(Store):
    #: Serialises create() within a process: makes memory:// exclusive, costs nothing elsewhere.
    _create_lock = threading.Lock()

    def __init__(self, make_fs: Callable[[], Any], protocol: str, root: str, url: str, retry: RetryPolicy) -> None:
        self._make_fs = make_fs
        self._fs: Any = None
        self.root = root.rstrip("/")
        self.url = redact_url(url)
        self.retry = retry
        self.protocol = protocol
        self.writable = protocol not in ("http", "https")
        self.can_list = self.writable

    @property
    def fs(self) -> Any:
        """Created on first use: a cache hit never constructs a client (gcsfs may probe for credentials)."""
        if self._fs is None:
            try:
                self._fs = self._make_fs()
            except ImportError as exc:
                raise _missing_backend(self.url, exc) from None
            except (ValueError, TypeError) as exc:
                raise RegistryError(f"cannot open registry {self.url}: {exc}", registry=self.url) from None
            check_resolvable(endpoint_host(self._fs, self.protocol, self.root), self.url)
        return self._fs

    def _p(self, path: str) -> str:
        return f"{self.root}/{path}" if self.root else path

    def _call(self, fn: Callable[[], Any], what: str, retry: bool = True) -> Any:
        """Run a backend call with retries (``retry=False``: raw errors, the caller retries), within
        the operation's deadline (:mod:`.deadline`); errors name the registry and its endpoint."""
        return self.retry.call(fn, f"{what} {self._named()}", registry=self.url) if retry else fn()

    def _named(self) -> str:
        """The registry URL, and the endpoint it is reached through where that says more (S3, GCS)."""
        endpoint = endpoint_url(self._fs, self.protocol, self.root) if self._fs is not None else None
        return f"{self.url} (endpoint {endpoint})" if endpoint and endpoint not in self.url else self.url

    def _limit(self) -> dict[str, Any]:
        """``timeout=`` for an fsspec call: what is left of the operation's deadline. Async backends
        (s3fs, gcsfs, http) cancel the request when it runs out; others do no network I/O here."""
        deadline = current_deadline()
        if deadline is None or not getattr(self.fs, "async_impl", False):
            return {}
        return {"timeout": max(0.001, deadline.remaining())}

    def read(self, path: str) -> bytes | None:
        full = self._p(path)
        try:
            return self._call(lambda: self.fs.cat_file(full, **self._limit()), f"read {path} from")
        except FileNotFoundError:
            return None

    def size(self, path: str) -> int | None:
        full = self._p(path)
        try:
            info = self._call(lambda: self.fs.info(full, **self._limit()), f"stat {path} in")
        except FileNotFoundError:
            return None
        if info.get("type") == "directory":
            return None
        return int(info["size"])

    def read_range(self, path: str, start: int, end: int) -> bytes:
        full = self._p(path)
        return self._call(
            lambda: self.fs.cat_file(full, start=start, end=end, **self._limit()),
            f"read {path} [{start}, {end}) from",
            retry=False,
        )

    def create(self, path: str, data: bytes) -> bool:
        if not self.writable:
            raise self._read_only()
        full = self._p(path)
        with self._create_lock:
            try:
                self._call(lambda: self.fs.pipe_file(full, data, mode="create", **self._limit()), f"create {path} in")
            except FileExistsError:
                return False
            except TransferError as exc:
                if isinstance(exc.__cause__, TypeError):  # a backend from before exclusive writes existed
                    raise RegistryError(
                        f"{self.url}: this fsspec backend cannot create files exclusively "
                        f"({exc.__cause__}); upgrade fsspec/s3fs/gcsfs to 2024.12 or newer",
                        registry=self.url,
                    ) from None
                raise
        return True

    def replace(self, path: str, data: bytes) -> None:
        if not self.writable:
            raise self._read_only()
        full = self._p(path)
        self._call(lambda: self.fs.pipe_file(full, data, **self._limit()), f"write {path} to")

    def upload(self, path: str, local: str, progress: ProgressFn) -> bool:
        if not self.writable:
            raise self._read_only()
        if self.size(path) is not None:
            return False
        full = self._p(path)
        try:
            self._call(
                lambda: self.fs.put_file(local, full, callback=_progress_callback(progress), mode="create"),
                f"upload {path} to",
            )
        except FileExistsError:
            return False
        return True

    def list_dir(self, path: str) -> list[str]:
        full = self._p(path)
        try:
            self.fs.invalidate_cache(full)
            entries = self._call(lambda: self.fs.ls(full, detail=False, **self._limit()), f"list {path} in")
        except FileNotFoundError:
            return []
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        return sorted(n for n in names if n and not n.startswith("."))


def endpoint_host(fs: Any, protocol: str, root: str) -> str | None:
    """The host a backend will connect to, where it is known without a request; else None (no probe)."""
    url = endpoint_url(fs, protocol, root)
    return urlsplit(url).hostname if url else None


def endpoint_url(fs: Any, protocol: str, root: str) -> str | None:
    """The endpoint a backend will connect to (``http://127.0.0.1:9000``), where it is known without a
    request; else None.

    gcsfs resolves its endpoint itself (``endpoint_url``, ``STORAGE_EMULATOR_HOST``, Google's); s3fs only
    when one is given (``endpoint_url``, or ``AWS_ENDPOINT_URL[_S3]``): otherwise botocore decides from its
    own configuration files, which karchive does not second-guess.
    """
    url = getattr(fs, "endpoint_url", None) or (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url")
    if protocol in ("gs", "gcs"):
        url = getattr(fs, "_location", None) or url
    elif protocol in ("s3", "s3a"):
        url = url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    elif protocol in ("http", "https"):
        url = root
    if isinstance(url, str) and url:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"  # never the credentials
    return None


def check_resolvable(host: str | None, url: str) -> None:
    """Fail at once, in one line, when the backend's host name does not resolve.

    Cloud clients retry connection errors with backoff on their own (gcsfs six times, ~30 s) before
    karchive's policy sees them; a name that does not resolve (no network, a mistyped endpoint) would
    cost minutes to report. One ``getaddrinfo`` before the first request answers in milliseconds.
    """
    if not host:
        return
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        raise TransferError(
            f"registry {url}: cannot resolve {host} ({exc.strerror or exc}): no network, or a "
            "wrong endpoint (storage options / STORAGE_EMULATOR_HOST / AWS_ENDPOINT_URL)",
            registry=url,
            url=url,
            attempts=0,
        ) from None
    except (UnicodeError, ValueError) as exc:
        raise RegistryError(f"registry {url}: bad host name {host!r}: {exc}", registry=url) from None


def _missing_backend(url: str, exc: Exception) -> RegistryError:
    return RegistryError(
        f"registry {redact_url(url)} needs an fsspec backend that is not installed ({exc}); "
        "install karchive[s3] for s3://, karchive[gcs] for gs://, karchive[http] for http(s)://, "
        "karchive[oci] for oci://",
        registry=redact_url(url),
    )


def open_store(url: str, storage_options: dict[str, Any] | None = None, retry: RetryPolicy | None = None) -> Store:
    """A local directory for paths and ``file://``; fsspec for every other URL (client made lazily)."""
    retry = retry or RetryPolicy.from_env()
    options = dict(storage_options or {})
    own = SCHEMES.get(url.split("://", 1)[0].lower()) if "://" in url else None
    if own is not None:
        import importlib

        module, _, cls_name = own.partition(":")
        backend = getattr(importlib.import_module(f"{__package__}.{module}"), cls_name)
        try:
            return backend(url, options, retry)
        except ImportError as exc:
            raise _missing_backend(url, exc) from None
    if "://" not in url:
        return LocalStore(url)
    if url.startswith("file://"):
        return LocalStore(url[len("file://") :])
    import fsspec

    if "::" in url:  # chained URLs (e.g. simplecache::s3://...): let fsspec build the chain now
        try:
            fs, root = fsspec.core.url_to_fs(url, **options)
        except ImportError as exc:
            raise _missing_backend(url, exc) from None
        except (ValueError, TypeError) as exc:
            raise RegistryError(f"cannot open registry {redact_url(url)}: {exc}", registry=redact_url(url)) from None
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        return FsspecStore(lambda: fs, protocol, root, url, retry)
    protocol = url.split("://", 1)[0].lower()
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        raise _missing_backend(url, exc) from None
    except ValueError as exc:
        raise RegistryError(f"cannot open registry {redact_url(url)}: {exc}", registry=redact_url(url)) from None
    root = url.rstrip("/") if protocol in ("http", "https") else cls._strip_protocol(url)  # HTTP paths: full URLs
    kwargs = {**cls._get_kwargs_from_urls(url), **options}
    return FsspecStore(lambda: cls(**kwargs), protocol, root, url, retry)
