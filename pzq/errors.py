"""One error hierarchy for pzq, rooted in PzqError."""


class PzqError(Exception):
    """Base class of every error pzq raises on purpose."""


class ConfigError(PzqError):
    """An option or config file value is missing, unknown or out of range."""


class DecodeError(PzqError):
    """A frame layout from the wire or the store could not be decoded."""


class StoreError(PzqError):
    """The LevelDB store could not be opened, read or written."""


class EndpointError(PzqError):
    """A client cannot use an endpoint: it is malformed or cannot be connected to."""
