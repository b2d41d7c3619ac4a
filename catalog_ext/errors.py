"""One root exception for the whole project.

Every error a user can see is an :class:`OmniError`. Foreign exceptions (pyiceberg,
SQLAlchemy, Spark, ...) are translated at the adapter that called them, with
``raise ... from e``, so callers catch one type and messages always name the thing
and the place (file, line, field, id) plus what to do about it.
"""

from __future__ import annotations


class OmniError(Exception):
    """Root of every error raised by omni-iceberg."""

    #: process exit code used by the ``omni`` command for this error class
    exit_code: int = 1


class ConfigError(OmniError):
    """The catalog, warehouse or another setting is missing or wrong."""

    exit_code = 2


class InvalidIdentifierError(OmniError):
    """A table, column or batch name is not a valid or allowed identifier."""

    exit_code = 2


class NoSuchLogicalTableError(OmniError):
    """The named logical table does not exist."""

    exit_code = 2


class LogicalTableExistsError(OmniError):
    """A logical table of that name already exists."""

    exit_code = 2


class NoSuchVersionError(OmniError):
    """The requested logical version does not exist."""

    exit_code = 2


class SourceError(OmniError):
    """A source cannot be read at all (missing path, unknown format, unreadable file)."""

    exit_code = 2


class SchemaConflictError(OmniError):
    """A source's fields do not fit the logical table's contract."""

    exit_code = 2


class CommitConflictError(OmniError):
    """A catalog commit lost a race and could not be retried on the new base."""

    exit_code = 3


class RejectLimitExceededError(OmniError):
    """More records were rejected than the caller allowed; nothing was committed."""

    exit_code = 4
