"""The only package that talks to the Kubernetes API server.

Every function here does I/O (blocking calls of the official client; the executor runs them
in threads) and its name says what it reads or writes. It turns API objects into
``baton.model`` types and plans' manifests into API calls; it decides nothing.
"""
