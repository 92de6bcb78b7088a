{{- define "loadwise.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "loadwise.labels" -}}
app.kubernetes.io/name: {{ include "loadwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "loadwise.selector" -}}
app.kubernetes.io/name: {{ include "loadwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "loadwise.fullname" -}}
{{- printf "%s-%s" .Release.Name (include "loadwise.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
