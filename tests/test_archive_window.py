"""Frames larger than the level's zstd window get a window that spans them (long-distance matching),
bounded so that every reader's default limits decode them (issue 24: archive size against a solid zstd)."""

import os

import pytest
import zstandard
from hostile_factory import manifest_for

from karchive.errors import LimitExceededError
from karchive.format.reader import ArchiveReader, Limits
from karchive.format.writer import MAX_WINDOW_LOG, ArchiveWriter

#: Level 3's own window is 2 MiB: two copies of a 2.5 MiB block lie too far apart for it to match them.
BLOCK = os.urandom(5 * 512 * 1024)
MEMBERS = [("sources/far-a.bin", BLOCK), ("sources/far-b.bin", BLOCK)]


def _archive(level: int = 3) -> bytes:
    w = ArchiveWriter(level=level, dictionary="none", threads=1)
    w.add_group(MEMBERS, use_dict=False)
    return w.to_bytes(manifest_for(dict(MEMBERS), format_version="2.0", variants=[]))


def test_a_frame_larger_than_the_window_is_compressed_with_a_window_spanning_it():
    data = _archive()
    reader = ArchiveReader.from_bytes(data)
    frame = reader.frames[reader.members["sources/far-b.bin"].frame]
    blob = data[frame.offset : frame.offset + frame.length]
    params = zstandard.get_frame_parameters(blob)
    assert params.window_size >= frame.size and params.window_size <= 1 << MAX_WINDOW_LOG
    # The second copy is found 2.5 MiB back: the frame costs one copy, not two.
    assert frame.length < len(BLOCK) * 1.1
    assert reader.read("sources/far-a.bin") == BLOCK and reader.read("sources/far-b.bin") == BLOCK
    assert reader.verify() == []
    assert _archive() == data  # the window follows from the frame's size alone: same bytes again


def test_the_window_stays_within_the_readers_bound():
    w = ArchiveWriter(level=19)
    assert w._window_log(100) == 0 and w._window_log(8 << 20) == 0  # the level's own window spans these
    assert w._window_log((8 << 20) + 1) == 24
    assert w._window_log(1 << 30) == MAX_WINDOW_LOG
    assert 1 << MAX_WINDOW_LOG <= Limits().max_window_bytes


def test_a_reader_with_a_smaller_window_limit_refuses_the_frame():
    data = _archive()
    reader = ArchiveReader.from_bytes(data, limits=Limits(max_window_bytes=2 << 20))
    with pytest.raises(LimitExceededError, match="window"):
        reader.read("sources/far-a.bin")
