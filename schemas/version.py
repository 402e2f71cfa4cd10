"""The one schema version shared by every file bertstream writes or reads."""

SCHEMA_VERSION = 1


class SchemaError(ValueError):
    """A shard, sample or manifest does not match the schema this build reads."""
