{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "baton.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object name: the release name, plus "-baton" unless it contains it. */}}
{{- define "baton.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "baton.selectorLabels" -}}
app.kubernetes.io/name: {{ include "baton.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "baton.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "baton.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: baton
{{- end -}}

{{/* The Secret holding the digest key: digestKey.existingSecret, else the chart's own. */}}
{{- define "baton.digestKeySecret" -}}
{{- default (printf "%s-digest-key" (include "baton.fullname" .)) .Values.digestKey.existingSecret -}}
{{- end -}}

{{- define "baton.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "baton.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "baton.metricsServiceName" -}}
{{- printf "%s-metrics" (include "baton.fullname" .) -}}
{{- end -}}

{{/* repository@digest when image.digest is set (the tag is then ignored), else repository:tag. */}}
{{- define "baton.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Labels of the operator pods: the standard labels, component "operator", and podLabels
(which cannot replace a standard label: the Deployment's selector must keep matching). */}}
{{- define "baton.podLabels" -}}
{{- $std := include "baton.labels" . | fromYaml -}}
{{- $_ := set $std "app.kubernetes.io/component" "operator" -}}
{{- toYaml (merge $std (deepCopy .Values.podLabels)) -}}
{{- end -}}

{{/*
Labels of the `helm test` pod: the standard labels, component "test", but a name of its own
("<name>-test"). It must match no selector of the release: a ReplicaSet adopts any ownerless pod
its selector matches (and would then delete one as a surplus), and the metrics Service and the
PodDisruptionBudget would count it.
*/}}
{{- define "baton.testLabels" -}}
{{- $std := include "baton.labels" . | fromYaml -}}
{{- $_ := set $std "app.kubernetes.io/name" (printf "%s-test" (include "baton.name" .) | trunc 63 | trimSuffix "-") -}}
{{- $_ := set $std "app.kubernetes.io/component" "test" -}}
{{- toYaml $std -}}
{{- end -}}

{{/* "true" when Baton watches every namespace (ClusterRole), "" when it watches a list (Roles). */}}
{{- define "baton.clusterWide" -}}
{{- if not .Values.watch.namespaces -}}true{{- end -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds of the operator pods: max(terminationGracePeriodSeconds,
2 x (maxDrainSeconds + 5)).
Why: a shutdown that cannot finish inside the grace period is a SIGKILL. On SIGTERM a replica
starts no new transition and lets the step in flight finish within its bound -- at worst a
drain (maxDrainSeconds) plus 5 s to record it -- and only then hands back its Leases. The factor 2
leaves as much time again for the hand-back, kopf's own stop and a slow API server, so that the
kubelet's SIGKILL never lands mid-step.
*/}}
{{- define "baton.terminationGracePeriodSeconds" -}}
{{- $floor := int .Values.terminationGracePeriodSeconds -}}
{{- $fromDrain := mul 2 (add (int .Values.maxDrainSeconds) 5) -}}
{{- max $floor $fromDrain -}}
{{- end -}}

{{/* BATON_SHUTDOWN_GRACE_SECONDS: the time the step in flight gets on SIGTERM (drain + 5 s). */}}
{{- define "baton.shutdownGraceSeconds" -}}
{{- add (int .Values.maxDrainSeconds) 5 -}}
{{- end -}}

{{/*
The API rules the operator needs, and nothing more (docs/chart.md lists why each one is there).
Used for the ClusterRole (all namespaces) and for each Role (a namespace list): every object
Baton touches is namespaced, so the rules are the same in both scopes.
*/}}
{{- define "baton.rules" -}}
# ToolRuntimes: Baton's informer lists and watches them; Baton patches their metadata (its
# finalizer baton.dev/retire, consumed verb annotations). No create, update or delete.
- apiGroups: ["baton.dev"]
  resources: ["toolruntimes"]
  verbs: ["list", "watch", "patch"]
# Status is written only through the status subresource (fenced by the CRD's CEL rule).
- apiGroups: ["baton.dev"]
  resources: ["toolruntimes/status"]
  verbs: ["patch"]
# ToolRuntimeClaims: listed and watched (a claim pins the generation it names); Baton writes only
# their status (Stale once the claimed generation is gone). No create, update or delete.
- apiGroups: ["baton.dev"]
  resources: ["toolruntimeclaims"]
  verbs: ["list", "watch"]
- apiGroups: ["baton.dev"]
  resources: ["toolruntimeclaims/status"]
  verbs: ["patch"]
# Pods carry a controller ownerReference with blockOwnerDeletion to their ToolRuntime: where the
# OwnerReferencesPermissionEnforcement admission plugin runs, that needs update on finalizers.
- apiGroups: ["baton.dev"]
  resources: ["toolruntimes/finalizers"]
  verbs: ["update"]
# Generation pods: listed and watched (selected by label baton.dev/runtime on the server), read
# by name (the only proof a pod is gone), created, flipped serving true/false (patch), deleted
# with the runtime's grace, force-deleted on a recorded force recovery.
# No pods/exec, pods/log, pods/eviction, no update.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The runtime's stable Service (spec.service): listed and watched by label, read by name when a
# create finds the name taken (a Service Baton does not own is reported, never touched).
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Lifecycle Leases baton-<runtime>: the per-runtime lock with its fencing token.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
# Events on ToolRuntimes (CleanupFailed, ForceRecovered, StaleReset, ...): created under a unique
# name; a repeat of the same one within minutes patches its count (client-go's correlation).
# kopf's own event posting is off.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# Stop admission = wait until no EndpointSlice of the runtime's Service lists the old pod ready
# (watched by label baton.dev/runtime, which the EndpointSlice controller copies from the Service).
# With spec.service.gateway the Service has no selector and Baton writes its one EndpointSlice
# (the gateway pods), deletes it when the field is turned off, and deletes the slices the
# EndpointSlice controller left from when the Service had a selector.
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list", "watch", "create", "patch", "delete"]
{{- if and .Values.gateway.enabled .Values.gateway.isolateToolPods }}
# gateway.isolateToolPods: per runtime routed through the gateway, the NetworkPolicy that admits
# only the gateway (and the operator) to its pods, owned by the ToolRuntime; watched by label
# baton.dev/runtime, created, patched and deleted by UID (baton.k8s.networkpolicies).
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["list", "watch", "create", "patch", "delete"]
{{- end }}
{{- if .Values.rbac.readConfigMaps }}
# ConfigMaps a pod template references: their data is part of the template hash, and a
# watch on them starts the handoff when it changes (config-ref roll).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- if eq (include "baton.readsSecrets" .) "true" }}
# Secrets a pod template references, for the same reason (only a digest of their data leaves
# the operator). See rbac.readSecrets for when this is granted.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end -}}


{{/*
"true" when the operator may read Secrets (rbac.readSecrets): the RBAC rule and the operator's
BATON_WATCH_SECRETS follow the same answer, so it never watches what it may not read.
*/}}
{{- define "baton.readsSecrets" -}}
{{- if or (eq .Values.rbac.readSecrets "always") (and (eq .Values.rbac.readSecrets "auto") (not (include "baton.clusterWide" .))) -}}
true
{{- else -}}
false
{{- end -}}
{{- end -}}

{{/* --- the gateway (gateway.enabled; docs/chart.md "The gateway") --------------------------- */}}

{{- define "baton.gatewayName" -}}
{{- printf "%s-gateway" (include "baton.fullname" .) -}}
{{- end -}}

{{/* The Secret holding the gateway admin key: gateway.adminKey.existingSecret, else the chart's own. */}}
{{- define "baton.gatewayAdminKeySecret" -}}
{{- default (printf "%s-gateway-admin-key" (include "baton.fullname" .)) .Values.gateway.adminKey.existingSecret -}}
{{- end -}}

{{/*
Selector labels of the gateway pods. A name of their own ("<name>-gateway"), like the test pod's:
the operator's Deployment, PDB and metrics Service select the plain name and instance, and must
never count or adopt a gateway pod.
*/}}
{{- define "baton.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-gateway" (include "baton.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of the gateway's objects: the standard labels with the gateway's name, component "gateway". */}}
{{- define "baton.gatewayLabels" -}}
{{- $std := include "baton.labels" . | fromYaml -}}
{{- $_ := set $std "app.kubernetes.io/name" (printf "%s-gateway" (include "baton.name" .) | trunc 63 | trimSuffix "-") -}}
{{- $_ := set $std "app.kubernetes.io/component" "gateway" -}}
{{- toYaml $std -}}
{{- end -}}

{{/* BATON_SHUTDOWN_GRACE_SECONDS of the gateway: its grace period minus 5 s, so the calls in
flight finish (or are answered GatewayShutdown) before the kubelet's SIGKILL. */}}
{{- define "baton.gatewayShutdownGraceSeconds" -}}
{{- max 1 (sub (int .Values.gateway.terminationGracePeriodSeconds) 5) -}}
{{- end -}}

{{/*
The API rules the gateway's views need (baton.gateway.views: ToolRuntimes and pods, listed and
watched, nothing else); test_chart_render checks them against what the code declares.
*/}}
{{- define "baton.gatewayRules" -}}
# ToolRuntimes: which generation serves, spec.service (ports, gateway), budgets.admissionSeconds.
- apiGroups: ["baton.dev"]
  resources: ["toolruntimes"]
  verbs: ["list", "watch"]
# Generation pods (selected by label baton.dev/runtime): serving label, readiness, pod IP; and
# every pod's IPs and namespace: who a caller is (spec.service.clients, docs/gateway.md).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- end -}}

{{/*
A bind address from .Values.bindAddress and a port: ":8080" (every address of both families),
"10.0.0.1:8080", or "[fd00::1]:8080" (an IPv6 literal in brackets).
*/}}
{{- define "baton.bind" -}}
{{- $host := .host | default "" -}}
{{- if contains ":" $host -}}[{{ $host }}]:{{ .port }}{{- else -}}{{ $host }}:{{ .port }}{{- end -}}
{{- end -}}
