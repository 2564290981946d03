"""The API's names, in one place: group, version, kinds, plurals, every ``baton.dev/...`` label,
annotation and finalizer, and the pure functions that name the objects Baton owns. No I/O.

The operator, its adapters and the kubectl plugin (``baton.cli``) all read them from here, so a
name the API server stores is spelled once.
"""

from __future__ import annotations

GROUP = "baton.dev"
VERSION = "v1alpha1"
API_VERSION = "baton.dev/v1alpha1"  # GROUP/VERSION, as objects carry it

KIND = "ToolRuntime"
PLURAL = "toolruntimes"
CLAIM_KIND = "ToolRuntimeClaim"
CLAIM_PLURAL = "toolruntimeclaims"

# On a ToolRuntime: held until its last generation is retired and its Service and Lease are gone.
FINALIZER = "baton.dev/retire"

# Labels on the objects Baton owns (pods, the Service, the Lease); the informers select on RUNTIME.
LABEL_RUNTIME = "baton.dev/runtime"
LABEL_GENERATION = "baton.dev/generation"
LABEL_SERVING = "baton.dev/serving"

# Annotations on a generation's pod.
ANN_GENERATION = "baton.dev/generation"
ANN_FENCING_TOKEN = "baton.dev/fencing-token"
ANN_TEMPLATE_HASH = "baton.dev/template-hash"

# Annotations a person (or the plugin) writes on a ToolRuntime: requests naming a generation.
ANN_RESET = "baton.dev/reset"
ANN_FORCE_RECOVERY = "baton.dev/force-recovery"
ANN_FORCE_RETIRE = "baton.dev/force-retire"

# Events' reportingComponent.
REPORTING_COMPONENT = "baton.dev/operator"


def pod_name(runtime: str) -> str:
    """Every generation's pod has the runtime's name: the API server's name uniqueness then
    refuses a second pod of a runtime while any earlier one exists, whoever sends the create."""
    return runtime


def lease_name(runtime: str) -> str:
    return f"baton-{runtime}"
