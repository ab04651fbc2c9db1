{{/* Names and labels. */}}
{{- define "trainguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "trainguard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "trainguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "trainguard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "trainguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trainguard
{{- end -}}

{{- define "trainguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "trainguard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "trainguard.workloadNamespace" -}}
{{- default .Release.Namespace .Values.workloadNamespace -}}
{{- end -}}

{{/* The served namespaces when not serving all (the workload namespace always among them). */}}
{{- define "trainguard.servedNamespaces" -}}
{{- $list := list (include "trainguard.workloadNamespace" .) -}}
{{- range .Values.watch.namespaces -}}{{- $list = append $list . -}}{{- end -}}
{{- $list | uniq | toJson -}}
{{- end -}}

{{- define "trainguard.peering" -}}
{{- if gt (int .Values.replicaCount) 1 -}}true{{- end -}}
{{- end -}}

{{/* The RBAC features this values file enables (k8s/rbac.py FEATURES; files/rbac.yaml). */}}
{{- define "trainguard.features" -}}
{{- $f := list "core" -}}
{{- if .Values.watch.allNamespaces -}}{{- $f = append $f "allNamespaces" -}}{{- end -}}
{{- if .Values.slinky.enabled -}}{{- $f = append $f "slinky" -}}{{- end -}}
{{- if include "trainguard.peering" . -}}{{- $f = append $f "peering" -}}{{- end -}}
{{- if .Values.kubernetes.enabled -}}{{- $f = append $f "kubernetes" -}}{{- end -}}
{{- $f | toJson -}}
{{- end -}}

{{/* rules SCOPE: the merged PolicyRules of the enabled features in one scope (JSON list). */}}
{{- define "trainguard.rules" -}}
{{- $table := .root.Files.Get "files/rbac.yaml" | fromYaml -}}
{{- $rules := list -}}
{{- range (include "trainguard.features" .root | fromJsonArray) -}}
{{- $feature := get $table . | default dict -}}
{{- range (get $feature $.scope | default list) -}}{{- $rules = append $rules . -}}{{- end -}}
{{- end -}}
{{- $rules | toJson -}}
{{- end -}}

{{/* The scheduler spec(s): Slurm and/or Kubernetes workloads. */}}
{{- define "trainguard.scheduler" -}}
{{- $s := list -}}
{{- if .Values.slurm.enabled -}}{{- $s = append $s .Values.slurm.scheduler -}}{{- end -}}
{{- if .Values.kubernetes.enabled -}}{{- $s = append $s "kubernetes" -}}{{- end -}}
{{- join "," $s -}}
{{- end -}}

{{/* The Secret and key holding the database URL; empty for SQLite. */}}
{{- define "trainguard.dbSecret" -}}
{{- if .Values.database.url.existingSecret -}}
{{- .Values.database.url.existingSecret -}}
{{- else if .Values.mysql.enabled -}}
{{- default (printf "%s-mysql" .Release.Name) (dig "auth" "existingSecret" "" .Values.mysql) -}}
{{- end -}}
{{- end -}}

{{- define "trainguard.dbKey" -}}
{{- if .Values.database.url.existingSecret -}}{{ .Values.database.url.key }}{{- else -}}url{{- end -}}
{{- end -}}

{{/* Environment shared by the operator and the migration init container: the database. */}}
{{- define "trainguard.dbEnv" -}}
- name: TRAINGUARD_HOME
  value: /var/lib/trainguard
{{- if include "trainguard.dbSecret" . }}
- name: TRAINGUARD_DB_URL_FILE
  value: /etc/trainguard/db/url
{{- end }}
{{- end -}}

{{- define "trainguard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
