"""Errors of the id index, all under the project's one root (:class:`OmniError`)."""

from __future__ import annotations

from catalog_ext.errors import OmniError


class MalformedIdError(OmniError):
    """An id is not 32 hex characters (md5 or uuid hex), so it can name no row."""

    exit_code = 2


class IndexUnavailableError(OmniError):
    """The index backend cannot be reached or opened (HBase down, LMDB folder unwritable)."""

    exit_code = 5


class IndexCorruptError(OmniError):
    """The index holds something it never writes (two files under one key, an unreadable record)."""

    exit_code = 5


class IndexInputError(OmniError):
    """A writer handed the index rows that do not match the data file it says they are from."""

    exit_code = 5
