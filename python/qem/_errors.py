"""The exceptions of qem: one class per family of library statuses.

Every error the C library reports is a :class:`qem.Error` carrying the
library's own message (what is wrong and what to do), its ``status`` (the
``qem_status`` number), ``status_name`` (its short description) and
``group``. Subclasses follow the status families, and some also derive
from the built-in exception a Python user would catch::

    Error
    +-- UsageError (ValueError)         the call asked for something invalid
    +-- FileSystemError (OSError)       a read, write or link failed
    |   +-- ExistsError (FileExistsError)  the destination already exists
    |   +-- ChangedError                the file changed while it was read
    +-- FormatError                     the file is malformed or corrupt
    |   +-- ChecksumError               corruption proven by a digest
    +-- UnsupportedError                valid, but not something qem does
    +-- LimitError                      memory, disk or a size limit
    +-- CancelledError                  a progress callback stopped the call

Ctrl-C during a long call raises ``KeyboardInterrupt`` itself (the call
stops at its next unit of work and leaves nothing behind).
"""


class Error(Exception):
    """An error reported by the qem library."""

    status = None
    status_name = None
    group = None

    def __new__(cls, message, status=None, status_name=None, group=None):
        # One argument reaches the base: OSError would read more as errno.
        return super().__new__(cls, message)

    def __init__(self, message, status=None, status_name=None, group=None):
        super().__init__(message)
        self.status = status
        self.status_name = status_name
        self.group = group

    def __reduce__(self):
        # Errors cross process boundaries (Dask workers) whole.
        return (type(self), (str(self), self.status, self.status_name, self.group))


class UsageError(Error, ValueError):
    """The call asked for something the library refuses (a bad argument)."""


class FileSystemError(Error, OSError):
    """A read, write, sync or link failed."""


class ExistsError(FileSystemError, FileExistsError):
    """The destination already exists; qem never overwrites."""


class ChangedError(FileSystemError):
    """A file changed while it was being read."""


class FormatError(Error):
    """The file is malformed or corrupt."""


class ChecksumError(FormatError):
    """Corruption proven by a checksum or digest."""


class UnsupportedError(Error):
    """Valid, but not something qem does (a newer version, a retired format,
    raw values the file does not keep, ...)."""


class LimitError(Error):
    """Memory, disk or a size limit."""


class CancelledError(Error):
    """A progress callback asked the call to stop."""


_BY_GROUP = {
    "usage": UsageError,
    "io": FileSystemError,
    "format": FormatError,
    "checksum": ChecksumError,
    "unsupported": UnsupportedError,
    "limit": LimitError,
    "cancelled": CancelledError,
}
_QEM_E_EXISTS = 4
_QEM_E_CHANGED = 27


def from_status(status, group, status_name, message):
    """The exception for a library status (called by the C extension)."""
    if status == _QEM_E_EXISTS:
        cls = ExistsError
    elif status == _QEM_E_CHANGED:
        cls = ChangedError
    else:
        cls = _BY_GROUP.get(group, Error)
    return cls(message, status, status_name, group)
