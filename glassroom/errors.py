"""The one user-facing error type.

Raise GlassroomError for a user's mistake (bad config, missing file, corrupt shard, wrong
checkpoint) with one sentence that names the thing and what to do. The CLI prints it as
`error: ...` on one line and exits 2; no traceback unless `--debug`.
"""


class GlassroomError(Exception):
    """A mistake the user can fix; its message is shown as one line."""


class ConfigError(GlassroomError):
    """A config value is unknown, missing, of the wrong type or impossible; names the key path."""
