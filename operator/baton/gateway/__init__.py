"""The gateway: the data path in front of ToolRuntimes whose spec.service.gateway is true
(DESIGN.md, "Gateway"; ``python -m baton gateway``). Does I/O: it serves HTTP, dials serving
pods, holds a registration Lease and watches ToolRuntimes and pods (through ``baton.cache`` and
``baton.k8s``, like the operator).

It reads the same views as the operator and never decides a lifecycle step (an import-linter
contract keeps ``baton.lifecycle`` and ``baton.execute`` out): a call is forwarded to the pod the
runtime's status names as current, labelled serving, Ready, not sealed; held while a transition
is under way; refused with the reason otherwise. ``route`` is the pure part (Host parsing,
the forwarding decision, refusal bodies), with ``hygiene`` (hop-by-hop headers, smuggling).
"""
