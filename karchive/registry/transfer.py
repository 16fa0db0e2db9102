"""Chunked downloads: one ranged read per chunk, each retried on its own, so a dropped connection
costs one chunk, not the whole archive."""

from __future__ import annotations

from typing import BinaryIO

from ..errors import TransferError
from .deadline import progress as progress_made
from .progress import NoProgress, Progress
from .retry import RetryPolicy
from .store import Store

CHUNK = 8 * 1024 * 1024


def download(
    store: Store,
    path: str,
    size: int,
    out: BinaryIO,
    *,
    retry: RetryPolicy,
    progress: Progress | NoProgress | None = None,
    chunk: int = CHUNK,
) -> None:
    progress = progress or NoProgress()
    offset = 0
    try:
        while offset < size:
            end = min(size, offset + chunk)

            def fetch(start: int = offset, stop: int = end) -> bytes:
                data = store.read_range(path, start, stop)
                if len(data) == size and start == 0 and stop != size:
                    return data  # the server ignored Range and sent everything: take it
                if len(data) != stop - start:
                    # A short body is a broken transfer, worth another attempt.
                    raise ConnectionError(f"short read: {len(data)} of {stop - start} bytes")
                return data

            data = retry.call(fetch, f"download of {path} from {store.url} at byte {offset}", registry=store.url)
            progress_made()  # the registry is answering: a large archive is bounded by a stall, not its size
            out.write(data)
            offset += len(data)
            progress.update(len(data))
    except FileNotFoundError:
        raise TransferError(
            f"{path} is missing from {store.url} although a version record points at it (damaged registry)",
            registry=store.url,
            url=f"{store.url}/{path}",
            attempts=1,
        ) from None  # a missing object is not retried
    finally:
        progress.close()
