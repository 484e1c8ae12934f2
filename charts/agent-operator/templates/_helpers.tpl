{{/* Chart name, or nameOverride. */}}
{{- define "agent-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name: fullnameOverride, else the release name if it contains the chart
name (`helm install agent-operator` gives "agent-operator", the names of manifests/), else
"<release>-<chart>".
*/}}
{{- define "agent-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agent-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels manifests/ puts on every object (app.kubernetes.io/name and part-of). */}}
{{- define "agent-operator.baseLabels" -}}
app.kubernetes.io/name: {{ include "agent-operator.name" . }}
app.kubernetes.io/part-of: agent-operator
{{- end }}

{{/* Labels of every object: those of manifests/ plus Helm's standard ones. */}}
{{- define "agent-operator.labels" -}}
{{ include "agent-operator.baseLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ include "agent-operator.chart" . }}
{{- end }}

{{/*
Selector of the operator's pods: the same as manifests/ (name + component), so that the
Deployment, Service and PodDisruptionBudget selectors, which are immutable, stay those of a
kustomize install.
*/}}
{{- define "agent-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-operator.name" . }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "agent-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agent-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
"true" when the operator runs with leader election: leaderElection.enabled, or sharding.enabled
(`--sharding` implies `--leader-elect`: the leader is the sharder), else empty.
*/}}
{{- define "agent-operator.leaderElection" -}}
{{- if or .Values.leaderElection.enabled .Values.sharding.enabled }}true{{ end }}
{{- end }}

{{- define "agent-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The operator's rules against the Kubernetes API, and nothing more (no wildcards): the
ClusterRole's, or each watched namespace's Role's. docs/install.md#permissions says why each.
*/}}
{{- define "agent-operator.rules" -}}
# Informers (list + watch) over the six kinds, and a merge patch of metadata.finalizers
# (agentcompute.dev/finalizer) on the resource itself.
- apiGroups: [agentcompute.dev]
  resources: [connections, skills, agents, agentdeployments, sandboxes, sandboxruns]
  verbs: [list, watch, patch]
# A finished SandboxRun is deleted after its ttlSecondsAfterFinished (as a Job is).
- apiGroups: [agentcompute.dev]
  resources: [sandboxruns]
  verbs: [delete]
# Status is written through the status subresource only (merge patch).
- apiGroups: [agentcompute.dev]
  resources: [connections/status, skills/status, agents/status, agentdeployments/status, sandboxes/status, sandboxruns/status]
  verbs: [patch]
# Connection Secrets and SandboxRun output ConfigMaps carry an ownerReference with
# blockOwnerDeletion: true (OwnerReferencesPermissionEnforcement).
- apiGroups: [agentcompute.dev]
  resources: [agentdeployments/finalizers, sandboxes/finalizers, sandboxruns/finalizers]
  verbs: [update]
# Secrets: read for credentials, imagePullSecretRef and envFrom; write the connection Secrets
# the operator owns (and only those).
- apiGroups: [""]
  resources: [secrets]
  verbs: [list, watch, create, patch, delete]
# ConfigMaps: a Skill's contentFrom / resourcesFrom, a SandboxRun's files; write the output
# ConfigMap each SandboxRun owns.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, watch, create, patch]
# Events about the resources: created, then their count patched when repeated.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- end }}
