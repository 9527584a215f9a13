{{/* The name every object carries: the release name when it already says gpugate, else <release>-gpugate. */}}
{{- define "gpugate.fullname" -}}
{{- if contains "gpugate" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-gpugate" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpugate.selectorLabels" -}}
app.kubernetes.io/name: gpugate
app.kubernetes.io/component: webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpugate.labels" -}}
app.kubernetes.io/name: gpugate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: gpugate
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpugate.secretName" -}}
{{- .Values.certificates.secretName | default (printf "%s-tls" (include "gpugate.fullname" .)) -}}
{{- end -}}

{{- define "gpugate.policiesConfigMap" -}}
{{- .Values.policies.existingConfigMap | default (printf "%s-policies" (include "gpugate.fullname" .)) -}}
{{- end -}}

{{/* Namespaces the webhooks and the backstop never see: the configured ones plus the release's own. */}}
{{- define "gpugate.excludedNamespaces" -}}
{{- $excluded := .Values.webhooks.excludedNamespaces | default list -}}
{{- if not (has .Release.Namespace $excluded) -}}
{{- $excluded = append $excluded .Release.Namespace -}}
{{- end -}}
{{- toJson $excluded -}}
{{- end -}}

{{/* The DNS names of the Service, as the apiserver addresses it (<svc>.<ns>.svc) and shorter. */}}
{{- define "gpugate.serviceNames" -}}
{{- $svc := include "gpugate.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- toJson (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) -}}
{{- end -}}
