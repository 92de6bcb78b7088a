{{- define "loadwise.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "loadwise.labels" -}}
app.kubernetes.io/name: {{ include "loadwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "loadwise.selector" -}}
app.kubernetes.io/name: {{ include "loadwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "loadwise.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "loadwise.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the pods run as: the chart's, or one made elsewhere. */}}
{{- define "loadwise.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "loadwise.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required with serviceAccount.create=false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image reference: a digest, when given, pins it (the tag is then informative). */}}
{{- define "loadwise.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Rules values.schema.json cannot state: the operator would refuse these at start-up. */}}
{{- define "loadwise.validate" -}}
{{- if eq .Values.schedulerName "default-scheduler" }}
{{- fail "schedulerName: default-scheduler is kube-scheduler's: loadwise would take every pod that names no scheduler. Choose another name (pods opt in with it)" }}
{{- end }}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicas: %d replicas need leaderElection.enabled=true (without election each would schedule, binding pods twice); or set replicas=1" (int .Values.replicas)) }}
{{- end }}
{{- with .Values.defaultPolicy.weights }}
{{- if and (eq (float64 .cpu) 0.0) (eq (float64 .memory) 0.0) }}
{{- fail "defaultPolicy.weights: cpu and memory cannot both be 0 (nothing would be weighed); give one of them a weight" }}
{{- end }}
{{- end }}
{{- range $name, $query := .Values.metrics.dimensions }}
{{- if or (not (regexMatch "^[a-z][a-z0-9-]{0,62}$" $name)) (has $name (list "cpu" "memory")) }}
{{- fail (printf "metrics.dimensions: %q is not a dimension name: lowercase letters, digits and '-', starting with a letter, at most 63, and not cpu or memory" $name) }}
{{- end }}
{{- end }}
{{- with .Values.leaderElection }}
{{- if not (and (lt (float64 .retryPeriodSeconds) (float64 .renewDeadlineSeconds)) (lt (float64 .renewDeadlineSeconds) (float64 .leaseDurationSeconds))) }}
{{- fail "leaderElection: retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds is required" }}
{{- end }}
{{- end }}
{{- $replicas := int .Values.replicas }}
{{- with .Values.podDisruptionBudget }}
{{- if and .enabled (gt $replicas 1) }}
{{- $min := .minAvailable }}
{{- if or (and (not (kindIs "string" $min)) (ge (int $min) $replicas)) (eq (toString $min) "100%") }}
{{- fail (printf "podDisruptionBudget.minAvailable (%v) must be below replicas (%d): otherwise no replica may ever be evicted and node drains hang" $min $replicas) }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.metrics }}
{{- with .prometheusCA }}
{{- if not (and .key (or .secret .configMap) (not (and .secret .configMap))) }}
{{- fail "metrics.prometheusCA needs key and one of secret or configMap, e.g. {secret: prometheus-ca, key: ca.crt}" }}
{{- end }}
{{- end }}
{{- with .prometheusBearerToken }}
{{- if not (and .secret .key) }}
{{- fail "metrics.prometheusBearerToken needs secret and key, e.g. {secret: prometheus-token, key: token}" }}
{{- end }}
{{- end }}
{{- with .prometheusBasicAuth }}
{{- if not (and .username .passwordSecret .passwordKey) }}
{{- fail "metrics.prometheusBasicAuth needs username, passwordSecret and passwordKey" }}
{{- end }}
{{- end }}
{{- if and .prometheusBearerToken .prometheusBasicAuth }}
{{- fail "metrics.prometheusBearerToken and metrics.prometheusBasicAuth: set one of them, not both" }}
{{- end }}
{{- end }}
{{- with .Values.serviceMonitor }}
{{- if and .enabled .scrapeTimeout }}
{{- if gt (include "loadwise.milliseconds" .scrapeTimeout | int64) (include "loadwise.milliseconds" .interval | int64) }}
{{- fail (printf "serviceMonitor.scrapeTimeout (%s) must not be longer than serviceMonitor.interval (%s): Prometheus refuses the scrape config" .scrapeTimeout .interval) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}


{{/* A Prometheus duration of the schema's form (1m30s, 500ms, 2h) in milliseconds. */}}
{{- define "loadwise.milliseconds" -}}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" . -1 }}
{{- $n := regexReplaceAll "^0+" (regexFind "^[0-9]+" .) "" | default "0" | int64 }}{{/* not octal */}}
{{- $unit := regexFind "[a-z]+$" . }}
{{- $factor := get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000) $unit }}
{{- $total = add $total (mul $n $factor) }}
{{- end }}
{{- $total -}}
{{- end -}}

{{/*
An alert's runbook: runbook_url under prometheusRule.runbookBaseURL, else the section's name.
Called with (list $ "AlertName").
*/}}
{{- define "loadwise.runbook" -}}
{{- $root := index . 0 -}}
{{- $alert := index . 1 -}}
{{- with $root.Values.prometheusRule.runbookBaseURL -}}
runbook_url: {{ printf "%s#%s" . (lower $alert) | quote }}
{{- else -}}
runbook: {{ printf "docs/runbooks.md, section %s, in loadwise's source" $alert | quote }}
{{- end -}}
{{- end }}
