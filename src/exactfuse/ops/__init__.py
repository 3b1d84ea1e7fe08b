"""Op families. Importing this package declares every op in the registry."""

from exactfuse.ops import (
    activation,  # noqa: F401
    w4a16,  # noqa: F401
)
