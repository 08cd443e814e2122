{{/* Names */}}
{{- define "elrwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "elrwatch.fullname" -}}
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

{{- define "elrwatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels */}}
{{- define "elrwatch.labels" -}}
helm.sh/chart: {{ include "elrwatch.chart" . }}
{{ include "elrwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "elrwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "elrwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "elrwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "elrwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "elrwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "elrwatch.dataClaim" -}}
{{- default (printf "%s-data" (include "elrwatch.fullname" .)) .Values.persistence.existingClaim }}
{{- end }}

{{/* Paths */}}
{{- define "elrwatch.checkpointDir" -}}
{{- if and (eq .Values.streaming.mode "sparkApplication") .Values.streaming.sparkApplication.checkpointDir }}
{{- .Values.streaming.sparkApplication.checkpointDir }}
{{- else }}
{{- printf "%s/checkpoint" .Values.persistence.mountPath }}
{{- end }}
{{- end }}

{{/* Store URL env: the SQLite file on the data volume, or the PostgreSQL URL from a Secret (never a value);
     the database password as a mounted file (ELRWATCH_STORE_PASSWORD_FILE, read by --store-password-file). */}}
{{- define "elrwatch.storeEnv" -}}
{{- if eq .Values.store.type "postgresql" }}
- name: ELRWATCH_STORE
  valueFrom:
    secretKeyRef:
      name: {{ required "store.postgresql.existingSecret is required when store.type=postgresql" .Values.store.postgresql.existingSecret }}
      key: {{ .Values.store.postgresql.urlKey }}
{{- with .Values.store.postgresql.passwordKey }}
- name: ELRWATCH_STORE_PASSWORD_FILE
  value: /etc/elrwatch/store-password/{{ . }}
{{- end }}
{{- else }}
- name: ELRWATCH_STORE
  value: {{ printf "sqlite:///%s/%s" .Values.persistence.mountPath .Values.store.sqlite.file | quote }}
{{- end }}
{{- end }}

{{- define "elrwatch.storeVolumes" -}}
{{- if and (eq .Values.store.type "postgresql") .Values.store.postgresql.passwordKey }}
- name: store-password
  secret:
    secretName: {{ .Values.store.postgresql.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.store.postgresql.passwordKey }}
        path: {{ .Values.store.postgresql.passwordKey }}
{{- end }}
{{- end }}

{{- define "elrwatch.storeVolumeMounts" -}}
{{- if and (eq .Values.store.type "postgresql") .Values.store.postgresql.passwordKey }}
- name: store-password
  mountPath: /etc/elrwatch/store-password
  readOnly: true
{{- end }}
{{- end }}

{{/* Environment shared by every elrwatch container (read-only root filesystem: writable HOME/TMPDIR). */}}
{{- define "elrwatch.commonEnv" -}}
- name: HOME
  value: /tmp
- name: TMPDIR
  value: /tmp
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- end }}

{{/* Kafka security env for the streaming job (elrwatch's source options security.protocol, ssl.cafile,
     ssl.certfile, ssl.keyfile, ssl.password.file, sasl.mechanism, sasl.username, sasl.password.file).
     Secret material only as files from Secret volumes, or env from secretKeyRef. */}}
{{- define "elrwatch.kafkaEnv" -}}
{{- $k := .Values.kafka }}
- name: ELRWATCH_SECURITY_PROTOCOL
  value: {{ $k.securityProtocol | quote }}
{{- if $k.tls.enabled }}
{{- with $k.tls.caKey }}
- name: ELRWATCH_SSL_CAFILE
  value: /etc/elrwatch/kafka-tls/{{ . }}
{{- end }}
{{- with $k.tls.certKey }}
- name: ELRWATCH_SSL_CERTFILE
  value: /etc/elrwatch/kafka-tls/{{ . }}
{{- end }}
{{- with $k.tls.keyKey }}
- name: ELRWATCH_SSL_KEYFILE
  value: /etc/elrwatch/kafka-tls/{{ . }}
{{- end }}
{{- with $k.tls.keyPasswordKey }}
- name: ELRWATCH_SSL_PASSWORD_FILE
  value: /etc/elrwatch/kafka-tls/{{ . }}
{{- end }}
{{- end }}
{{- if $k.sasl.enabled }}
- name: ELRWATCH_SASL_MECHANISM
  value: {{ $k.sasl.mechanism | quote }}
- name: ELRWATCH_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ required "kafka.sasl.existingSecret is required when kafka.sasl.enabled" $k.sasl.existingSecret }}
      key: {{ $k.sasl.usernameKey }}
- name: ELRWATCH_SASL_PASSWORD_FILE
  value: /etc/elrwatch/kafka-sasl/{{ $k.sasl.passwordKey }}
{{- end }}
{{- end }}

{{/* `elrwatch stream` arguments (both modes). */}}
{{- define "elrwatch.streamArgs" -}}
- stream
- --source
- {{ .Values.streaming.source | quote }}
- --bootstrap-servers
- {{ .Values.kafka.bootstrapServers | quote }}
- --topic
- {{ .Values.kafka.topic | quote }}
- --checkpoint
- {{ include "elrwatch.checkpointDir" . | quote }}
- --metrics-port
- {{ .Values.streaming.metricsPort | quote }}
- --metrics-host
- "0.0.0.0"
- --trigger
- {{ .Values.streaming.trigger | quote }}
- --buckets
- {{ .Values.streaming.buckets | quote }}
- --starting-offsets
- {{ .Values.streaming.startingOffsets | quote }}
{{- with .Values.streaming.maxRecordsPerBatch }}
- --max-records-per-batch
- {{ . | quote }}
{{- end }}
{{- if .Values.streaming.stateDir }}
- --state-dir
- {{ .Values.streaming.stateDir | quote }}
{{- else if and (eq .Values.streaming.mode "sparkApplication") .Values.streaming.sparkApplication.checkpointDir }}
- --state-dir
- {{ printf "%s/bucket-snapshots" .Values.persistence.mountPath | quote }}
{{- end }}
{{- range .Values.streaming.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* Volumes of the streaming pod(s). */}}
{{- define "elrwatch.streamVolumes" -}}
- name: data
{{- if .Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "elrwatch.dataClaim" . }}
{{- else }}
  emptyDir: {}
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.streaming.tmpSizeLimit }}
- name: spark-local
  emptyDir:
    sizeLimit: {{ .Values.streaming.tmpSizeLimit }}
{{- if .Values.kafka.tls.enabled }}
- name: kafka-tls
  secret:
    secretName: {{ required "kafka.tls.existingSecret is required when kafka.tls.enabled" .Values.kafka.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if .Values.kafka.sasl.enabled }}
- name: kafka-sasl
  secret:
    secretName: {{ .Values.kafka.sasl.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.kafka.sasl.passwordKey }}
        path: {{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- with (include "elrwatch.storeVolumes" . | trim) }}{{ . | nindent 0 }}{{- end }}
{{- end }}

{{- define "elrwatch.streamVolumeMounts" -}}
- name: data
  mountPath: {{ .Values.persistence.mountPath }}
- name: tmp
  mountPath: /tmp
- name: spark-local
  mountPath: /spark-local
{{- if .Values.kafka.tls.enabled }}
- name: kafka-tls
  mountPath: /etc/elrwatch/kafka-tls
  readOnly: true
{{- end }}
{{- if .Values.kafka.sasl.enabled }}
- name: kafka-sasl
  mountPath: /etc/elrwatch/kafka-sasl
  readOnly: true
{{- end }}
{{- with (include "elrwatch.storeVolumeMounts" . | trim) }}{{ . | nindent 0 }}{{- end }}
{{- end }}

{{/* Extra spark-submit options (read by pyspark when it starts the JVM, split with shlex). The job itself sets
     master (local mode), driver memory (ELRWATCH_SPARK_DRIVER_MEMORY) and its tuning confs; these add to them. */}}
{{- define "elrwatch.pysparkSubmitArgs" -}}
{{- $parts := list "--conf spark.local.dir=/spark-local" }}
{{- range $k, $v := .Values.streaming.sparkConf }}
{{- $parts = append $parts (printf "--conf %s" (printf "%s=%v" $k $v | squote)) }}
{{- end }}
{{- $parts = append $parts "pyspark-shell" }}
{{- join " " $parts }}
{{- end }}
