"""Watch-fed views of the objects Baton reads, selected on the server by label.

Does I/O: informers list and watch through ``baton.k8s.api`` (never by HTTP of their own). A
pass of decide() reads these views, not the API server (``baton.cache.snapshot`` builds its
``Observed`` from them); the only fresh reads left are the ones a guarantee needs: the GET that
confirms a pod gone (``baton.cache.snapshot``) and the Lease compare-and-swap (``baton.k8s.leases``).

Read-your-writes: the executor applies every object an API write returns (`Store.apply`), and
a store keeps, per object, the version with the highest resourceVersion, so a view is never
older than this process's own last write, whichever arrives first, the watch event or the reply.
(resourceVersions are compared as integers: opaque by contract, etcd revisions in practice.)
"""
