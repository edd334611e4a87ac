{{/* Names and shared pieces of the Squall chart. */}}

{{- define "squall.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "squall.fullname" -}}
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

{{- define "squall.labels" -}}
app.kubernetes.io/name: {{ include "squall.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "squall.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "squall.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The ZooKeeper connect string the operator and the workers use. */}}
{{- define "squall.zookeeperConnect" -}}
{{- if .Values.zookeeper.connect -}}
{{- .Values.zookeeper.connect -}}
{{- else if .Values.zookeeper.enabled -}}
{{- printf "%s-zookeeper.%s.svc:%d" (include "squall.fullname" .) .Release.Namespace (int .Values.zookeeper.clientPort) -}}
{{- else -}}
{{- fail "zookeeper.connect is required when zookeeper.enabled is false" -}}
{{- end -}}
{{- end -}}

{{/* Namespaces whose Topologies the operator runs (a list; empty when cluster-wide). */}}
{{- define "squall.watchNamespaces" -}}
{{- if .Values.operator.clusterWide -}}
{{- list | toJson -}}
{{- else if .Values.operator.watchNamespaces -}}
{{- .Values.operator.watchNamespaces | toJson -}}
{{- else -}}
{{- list .Release.Namespace | toJson -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the ZooKeeper digest credentials (key "credentials"). */}}
{{- define "squall.zkAuthSecret" -}}
{{- .Values.zookeeper.auth.existingSecret | default (printf "%s-zk-auth" (include "squall.fullname" .)) -}}
{{- end -}}
