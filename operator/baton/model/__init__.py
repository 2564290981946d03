"""Pure data: the ToolRuntime spec and status, and the observed snapshot decide() reads.

No I/O here, and no imports of kubernetes or kopf: these types are built by ``baton.cache.snapshot``
from API objects and consumed by ``baton.lifecycle``.
"""
