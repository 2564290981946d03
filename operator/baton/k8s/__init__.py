"""The only package of the operator that talks to the Kubernetes API server.

Every function here does I/O: async requests over aiohttp (``baton.k8s.api``: two connection
pools, no threads; the official client only loads the credentials), and its name says what it
reads or writes. Plain JSON in and out: ``baton.cache.snapshot`` turns API objects into
``baton.model`` types, and ``baton.lifecycle.manifests`` builds the manifests sent here; it
decides nothing.
"""
