{{- define "loadwise.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "loadwise.labels" -}}
app.kubernetes.io/name: {{ include "loadwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "loadwise.selector" -}}
app.kubernetes.io/name: {{ include "loadwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "loadwise.fullname" -}}
{{- printf "%s-%s" .Release.Name (include "loadwise.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Rules values.schema.json cannot state: the operator would refuse these at start-up. */}}
{{- define "loadwise.validate" -}}
{{- with .Values.leaderElection }}
{{- if not (and (lt (float64 .retryPeriodSeconds) (float64 .renewDeadlineSeconds)) (lt (float64 .renewDeadlineSeconds) (float64 .leaseDurationSeconds))) }}
{{- fail "leaderElection: retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds is required" }}
{{- end }}
{{- end }}
{{- end -}}
