{{/* Names and labels. */}}
{{- define "spectral.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "spectral.fullname" -}}
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

{{/* The name of one deployment's objects: <fullname>-<deployment>. */}}
{{- define "spectral.componentName" -}}
{{- printf "%s-%s" (include "spectral.fullname" .root) .name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "spectral.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spectral.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end }}

{{- define "spectral.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "spectral.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: spectral
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{- define "spectral.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "spectral.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "spectral.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding one database URL per deployment (key: the deployment's name). */}}
{{- define "spectral.loginsSecret" -}}
{{- default (printf "%s-logins" (include "spectral.fullname" .)) .Values.database.logins.existingSecret }}
{{- end }}

{{/*
Every workload of the release, as YAML ({items: [...]}): name, kind, args, the values it was
configured with, the Secret key of its database login, its ports and whether it is a consumer or
pays for model calls. The maintenance CronJob is listed too (kind CronJob). Templates read it with
`include "spectral.workloads" . | fromYaml`.
*/}}
{{- define "spectral.workloads" -}}
{{- $port := toString .Values.metrics.port }}
{{- $items := list }}
{{- if .Values.relay.enabled }}
{{- $items = append $items (dict "name" "relay" "kind" "Deployment" "values" .Values.relay "secretKey" "relay" "login" .Values.relay.login "args" (list "outbox" "relay" "--metrics-port" $port)) }}
{{- end }}
{{- range $name, $c := .Values.consumers }}
{{- if $c.enabled }}
{{- $kind := ternary "StatefulSet" "Deployment" (not (empty $c.journal)) }}
{{- $items = append $items (dict "name" $name "kind" $kind "values" $c "secretKey" $name "login" $c.login "consumer" true "llm" (default false $c.llm) "args" (list "consume" $name "--metrics-port" $port)) }}
{{- end }}
{{- end }}
{{- if .Values.clustersTick.enabled }}
{{- $items = append $items (dict "name" "clusters-tick" "kind" "Deployment" "values" .Values.clustersTick "secretKey" "clusters-tick" "login" .Values.clustersTick.login "llm" true "args" (list "clusters" "tick" "--every" (toString .Values.clustersTick.every) "--metrics-port" $port)) }}
{{- end }}
{{- if .Values.api.enabled }}
{{- $items = append $items (dict "name" "api" "kind" "Deployment" "values" .Values.api "secretKey" "api" "login" .Values.api.login "http" .Values.api.port "args" (list "api" "--host" "0.0.0.0" "--port" (toString .Values.api.port) "--metrics-port" $port)) }}
{{- end }}
{{- if .Values.mcp.enabled }}
{{- $items = append $items (dict "name" "mcp" "kind" "Deployment" "values" .Values.mcp "secretKey" "api" "http" .Values.mcp.port "noMetrics" true "args" (list "mcp" "--transport" "http" "--host" "0.0.0.0" "--port" (toString .Values.mcp.port))) }}
{{- end }}
{{- if .Values.maintenance.enabled }}
{{- if eq .Values.maintenance.mode "deployment" }}
{{- $items = append $items (dict "name" "maintenance" "kind" "Deployment" "values" (merge (dict "replicas" 1) .Values.maintenance) "secretKey" "maintenance" "login" .Values.maintenance.login "args" (list "maintenance" "--every" (toString .Values.maintenance.every) "--metrics-port" $port)) }}
{{- else }}
{{- $items = append $items (dict "name" "maintenance" "kind" "CronJob" "values" .Values.maintenance "secretKey" "maintenance" "login" .Values.maintenance.login "noMetrics" true "args" (list "maintenance")) }}
{{- end }}
{{- end }}
{{- toYaml (dict "items" $items) }}
{{- end }}

{{/* One workload's setting: its own value, else the chart's default. Args: root, w, key. */}}
{{- define "spectral.setting" -}}
{{- if and (hasKey .w.values .key) (not (kindIs "invalid" (get .w.values .key))) }}
{{- toYaml (get .w.values .key) }}
{{- else }}
{{- toYaml (get .root.Values.defaults .key) }}
{{- end }}
{{- end }}

{{/* The SPECTRAL_* settings every spectral process gets from the chart's values. */}}
{{- define "spectral.kafkaEnv" -}}
{{- $kafka := .Values.kafka }}
- name: SPECTRAL_KAFKA_BOOTSTRAP
  value: {{ required "kafka.bootstrap is required (host:port[,host:port])" $kafka.bootstrap | quote }}
- name: SPECTRAL_KAFKA_SECURITY_PROTOCOL
  value: {{ $kafka.securityProtocol | quote }}
- name: SPECTRAL_KAFKA_TRANSPORT
  value: {{ $kafka.transport | quote }}
{{- if eq $kafka.transport "confluent" }}
- name: SPECTRAL_KAFKA_GROUP_PROTOCOL
  value: {{ $kafka.groupProtocol | quote }}
{{- end }}
{{- if $kafka.sasl.mechanism }}
- name: SPECTRAL_KAFKA_SASL_MECHANISM
  value: {{ $kafka.sasl.mechanism | quote }}
- name: SPECTRAL_KAFKA_SASL_USERNAME
  value: {{ required "kafka.sasl.username is required with a SASL mechanism" $kafka.sasl.username | quote }}
- name: SPECTRAL_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ required "kafka.sasl.existingSecret is required with a SASL mechanism" $kafka.sasl.existingSecret }}
      key: {{ $kafka.sasl.passwordKey }}
{{- end }}
{{- if $kafka.tls.caSecret }}
- name: SPECTRAL_KAFKA_CA_FILE
  value: /etc/spectral/kafka-ca/{{ $kafka.tls.caKey }}
{{- end }}
{{- if $kafka.topicPrefix }}
- name: SPECTRAL_TOPIC_PREFIX
  value: {{ $kafka.topicPrefix | quote }}
{{- end }}
{{- end }}

{{/* The settings of the model gateway (for the workloads that pay for calls). */}}
{{- define "spectral.llmEnv" -}}
{{- $llm := .Values.llm }}
- name: SPECTRAL_SYNTHESIZER
  value: {{ $llm.synthesizer | quote }}
{{- if $llm.baseUrl }}
- name: SPECTRAL_LLM_BASE_URL
  value: {{ $llm.baseUrl | quote }}
{{- end }}
{{- if $llm.apiKeySecret }}
- name: SPECTRAL_LLM_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $llm.apiKeySecret }}
      key: {{ $llm.apiKeyKey }}
{{- end }}
- name: SPECTRAL_LLM_TIMEOUT_SECONDS
  value: {{ $llm.timeoutSeconds | quote }}
{{- if $llm.routes }}
- name: SPECTRAL_LLM_ROUTES
  value: {{ toJson $llm.routes | quote }}
{{- end }}
{{- if $llm.limits }}
- name: SPECTRAL_LLM_LIMITS
  value: {{ toJson $llm.limits | quote }}
{{- end }}
{{- end }}

{{/* `env` maps (global, then the workload's own, which wins) as a sorted env list. */}}
{{- define "spectral.extraEnv" -}}
{{- $env := mustMergeOverwrite (dict "SPECTRAL_LOG_FORMAT" "json" "SPECTRAL_METRICS_HOST" "0.0.0.0") (deepCopy (default (dict) .root.Values.env)) (deepCopy (default (dict) .own)) }}
{{- range $name := keys $env | sortAlpha }}
{{- $value := get $env $name }}
- name: {{ $name }}
  {{- /* numbers come from YAML as floats: whole ones are written whole, never as 1e+09 */}}
  value: {{ ternary (int64 $value | toString) (toString $value) (and (kindIs "float64" $value) (eq $value (floor $value))) | quote }}
{{- end }}
{{- end }}

{{/* The container's environment. Args: root, w. */}}
{{- define "spectral.env" -}}
{{ include "spectral.kafkaEnv" .root | trim }}
- name: SPECTRAL_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "spectral.loginsSecret" .root }}
      key: {{ .w.secretKey }}
{{- if .w.llm }}
{{ include "spectral.llmEnv" .root | trim }}
{{- end }}
{{- if .w.values.journal }}
- name: SPECTRAL_WORK_JOURNAL_DIR
  value: /var/lib/spectral/journal
{{- end }}
{{ include "spectral.extraEnv" (dict "root" .root "own" .w.values.env) | trim }}
{{- end }}

{{- define "spectral.probes" -}}
{{- if .w.noMetrics }}
startupProbe:
  tcpSocket: {port: http}
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  tcpSocket: {port: http}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  tcpSocket: {port: http}
  periodSeconds: 10
  failureThreshold: 3
{{- else }}
{{- $port := ternary "http" "metrics" (hasKey .w "http") }}
startupProbe:
  httpGet: {path: /healthz, port: {{ $port }}}
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet: {path: /healthz, port: {{ $port }}}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: {{ $port }}}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- end }}
{{- end }}

{{/* Volumes every spectral pod mounts: a writable /tmp, the Kafka CA when given. */}}
{{- define "spectral.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.tls.caSecret }}
{{- end }}
{{- end }}

{{- define "spectral.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  mountPath: /etc/spectral/kafka-ca
  readOnly: true
{{- end }}
{{- end }}

{{/* A workload's pod spec. Args: root, w. */}}
{{- define "spectral.podSpec" -}}
{{- $root := .root }}
{{- $w := .w }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
serviceAccountName: {{ include "spectral.serviceAccountName" $root }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ include "spectral.setting" (dict "root" $root "w" $w "key" "terminationGracePeriodSeconds") }}
{{- if eq $w.kind "CronJob" }}
restartPolicy: OnFailure
{{- end }}
{{- with (include "spectral.setting" (dict "root" $root "w" $w "key" "nodeSelector") | fromYaml) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (include "spectral.setting" (dict "root" $root "w" $w "key" "tolerations") | fromYamlArray) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (include "spectral.setting" (dict "root" $root "w" $w "key" "affinity") | fromYaml) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: spectral
    image: {{ include "spectral.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    args:
      {{- toYaml $w.args | nindent 6 }}
    env:
      {{- include "spectral.env" (dict "root" $root "w" $w) | trim | nindent 6 }}
    {{- if or (hasKey $w "http") (not $w.noMetrics) }}
    ports:
      {{- if hasKey $w "http" }}
      - name: http
        containerPort: {{ $w.http }}
      {{- end }}
      {{- if not $w.noMetrics }}
      - name: metrics
        containerPort: {{ $root.Values.metrics.port }}
      {{- end }}
    {{- end }}
    {{- if ne $w.kind "CronJob" }}
    {{- include "spectral.probes" (dict "w" $w) | trim | nindent 4 }}
    {{- end }}
    resources:
      {{- include "spectral.setting" (dict "root" $root "w" $w "key" "resources") | nindent 6 }}
    securityContext:
      {{- toYaml $root.Values.securityContext | nindent 6 }}
    volumeMounts:
      {{- include "spectral.volumeMounts" $root | nindent 6 }}
      {{- if $w.values.journal }}
      - name: journal
        mountPath: /var/lib/spectral/journal
      {{- end }}
volumes:
  {{- include "spectral.volumes" $root | nindent 2 }}
{{- end }}

{{/* Pod template metadata. Args: root, w. */}}
{{- define "spectral.podMetadata" -}}
labels:
  {{- include "spectral.selectorLabels" (dict "root" .root "name" .w.name) | nindent 2 }}
  {{- with (include "spectral.setting" (dict "root" .root "w" .w "key" "podLabels") | fromYaml) }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with (include "spectral.setting" (dict "root" .root "w" .w "key" "podAnnotations") | fromYaml) }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The alert rules: deploy/prometheus/spectral-alerts.yaml (files/spectral-alerts.yaml links to it),
as they are. With maintenance as a CronJob, no process is left to scrape between passes: the two
rules that watch `spectral maintenance` being scraped and succeeding watch the CronJob through
kube-state-metrics instead (same names, labels and meaning).
*/}}
{{- define "spectral.alertRules" -}}
{{- $rules := .Files.Get "files/spectral-alerts.yaml" | fromYaml }}
{{- if and .Values.maintenance.enabled (ne .Values.maintenance.mode "deployment") }}
{{- $cronjob := printf "cronjob=%q, namespace=%q" (include "spectral.componentName" (dict "root" . "name" "maintenance")) .Release.Namespace }}
{{- $replaced := dict
  "SpectralMaintenanceAbsent" (printf "absent(kube_cronjob_info{%s}) or max(kube_cronjob_spec_suspend{%s}) == 1" $cronjob $cronjob)
  "SpectralMaintenanceFailing" (printf "time() - max(kube_cronjob_status_last_successful_time{%s}) > 3 * 3600" $cronjob) }}
{{- $runbook := printf "kubectl -n %s get cronjob,jobs -l app.kubernetes.io/component=maintenance; the logs of its last Job's pod (`outbox maintenance failed`, `dedup maintenance failed`)." .Release.Namespace }}
{{- $summaries := dict
  "SpectralMaintenanceAbsent" "the maintenance CronJob is missing or suspended: nothing prunes the dedup record or the outbox"
  "SpectralMaintenanceFailing" "no maintenance Job has succeeded for {{ $value | humanizeDuration }}" }}
{{- range $group := $rules.groups }}
{{- range $rule := $group.rules }}
{{- if hasKey $replaced (default "" $rule.alert) }}
{{- $_ := set $rule "expr" (get $replaced $rule.alert) }}
{{- $_ := set $rule "annotations" (dict "summary" (get $summaries $rule.alert) "runbook" $runbook) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml (dict "groups" $rules.groups) }}
{{- end }}
