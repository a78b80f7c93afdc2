{{/*
The image of every devinject container.
*/}}
{{- define "devinject.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
Labels on every object: the name the kustomize manifests give, and Helm's own two (which
scripts/check-manifests.py sets aside when it compares the two renders).
*/}}
{{- define "devinject.labels" -}}
app.kubernetes.io/name: devinject
{{ include "devinject.helmLabels" . }}
{{- end }}

{{- define "devinject.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The values that no template could render sensibly, refused with the value and the fix.
*/}}
{{- define "devinject.validate" -}}
{{- if not (has .Values.path (list "runtime" "hook" "nri" "dra")) }}
{{- fail (printf "path %q is not one of runtime, hook, nri, dra" .Values.path) }}
{{- end }}
{{- if not (has .Values.engine (list "containerd" "crio" "docker" "k3s" "rke2")) }}
{{- fail (printf "engine %q is not one of containerd, crio, docker, k3s, rke2" .Values.engine) }}
{{- end }}
{{- if and (eq .Values.path "hook") (ne .Values.engine "crio") }}
{{- fail (printf "path hook needs engine crio (CRI-O reads oci-hooks(5) files), not %q: use path runtime, nri or dra" .Values.engine) }}
{{- end }}
{{- if and .Values.cdiRefresher.enabled (eq .Values.path "dra") }}
{{- fail "cdiRefresher.enabled is for the device plugin's CDI allocate modes: on the dra path the driver writes a CDI spec per claim itself; leave it false" }}
{{- end }}
{{- $shipped := list }}
{{- range $f, $_ := .Files.Glob "profiles/*.toml" }}
{{- $shipped = append $shipped (base $f | trimSuffix ".toml") }}
{{- end }}
{{- range .Values.profiles }}
{{- if not (has . $shipped) }}
{{- fail (printf "profiles: %q is not a shipped profile (%s); give your own in extraProfiles" . (join ", " $shipped)) }}
{{- end }}
{{- end }}
{{- range $name, $_ := .Values.extraProfiles }}
{{- if not (regexMatch "^[a-z0-9][a-z0-9-]*\\.toml$" $name) }}
{{- fail (printf "extraProfiles: %q is not a profile file name (lower-case letters, digits and '-', ending in .toml)" $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
--metrics-address for a component whose binary's default port is `default`: the pod's IP
alone when the port is that default.
*/}}
{{- define "devinject.metricsAddress" -}}
{{- if not .root.Values.metrics.enabled -}}
--metrics-address=off
{{- else if eq (int .port) (int .default) -}}
--metrics-address=$(POD_IP)
{{- else -}}
--metrics-address=$(POD_IP):{{ .port }}
{{- end }}
{{- end }}

{{/*
The environment of the long-running containers: the node's name (for the ones given `node`),
the log level and the pod's IP.
*/}}
{{- define "devinject.env" -}}
{{- with .root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- if .node }}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- end }}
- name: {{ .logVar }}
  value: {{ .root.Values.logLevel }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}

{{/*
The installer's mounts of the engine's configuration (`hook`: the engine's hooks directory too).
*/}}
{{- define "devinject.engineMounts" -}}
{{- $e := .Values.engine }}
{{- if eq $e "containerd" }}
- name: host-containerd
  mountPath: /host/etc/containerd
{{- else if eq $e "crio" }}
{{- if eq .Values.path "hook" }}
- name: host-oci-hooks
  mountPath: /host/etc/containers/oci/hooks.d
{{- end }}
- name: host-crio
  mountPath: /host/etc/crio
{{- else if eq $e "docker" }}
- name: host-docker
  mountPath: /host/etc/docker
{{- else if eq $e "k3s" }}
- name: k3s-containerd
  mountPath: /host/var/lib/rancher/k3s/agent/etc/containerd
- name: k3s-data
  mountPath: /host/var/lib/rancher/k3s/data
  readOnly: true
{{- else if eq $e "rke2" }}
{{- /* RKE2's bin directory links into its data directory: the whole tree read-only, the
containerd configuration directory writable over it. */}}
- name: rke2
  mountPath: /host/var/lib/rancher/rke2
  readOnly: true
- name: rke2-containerd
  mountPath: /host/var/lib/rancher/rke2/agent/etc/containerd
{{- end }}
{{- end }}

{{- define "devinject.engineVolumes" -}}
{{- $e := .Values.engine }}
{{- if eq $e "containerd" }}
- name: host-containerd
  hostPath:
    path: /etc/containerd
    type: DirectoryOrCreate
{{- else if eq $e "crio" }}
{{- if eq .Values.path "hook" }}
- name: host-oci-hooks
  hostPath:
    path: /etc/containers/oci/hooks.d
    type: DirectoryOrCreate
{{- end }}
- name: host-crio
  hostPath:
    path: /etc/crio
    type: Directory
{{- else if eq $e "docker" }}
- name: host-docker
  hostPath:
    path: /etc/docker
    type: DirectoryOrCreate
{{- else if eq $e "k3s" }}
- name: k3s-containerd
  hostPath:
    path: /var/lib/rancher/k3s/agent/etc/containerd
    type: Directory
- name: k3s-data
  hostPath:
    path: /var/lib/rancher/k3s/data
    type: Directory
{{- else if eq $e "rke2" }}
- name: rke2
  hostPath:
    path: /var/lib/rancher/rke2
    type: Directory
- name: rke2-containerd
  hostPath:
    path: /var/lib/rancher/rke2/agent/etc/containerd
    type: Directory
{{- end }}
{{- end }}

{{/*
The installer's --runtime (and --mode, --set-as-default): what it configures in the engine.
*/}}
{{- define "devinject.runtimeArgs" -}}
{{- if has .Values.path (list "nri" "dra") }}
- --runtime=none
{{- else if eq .Values.engine "crio" }}
- --runtime=crio
{{- if eq .Values.path "hook" }}
- --mode=hook
{{- end }}
{{- else if eq .Values.engine "docker" }}
- --runtime=docker
- --set-as-default
{{- else }}
- --runtime=containerd
{{- end }}
{{- end }}

{{/*
The installer's --restart-mode: none where it configures no engine.
*/}}
{{- define "devinject.restartMode" -}}
{{- if has .Values.path (list "nri" "dra") -}}
none
{{- else -}}
{{ .Values.installer.restartMode }}
{{- end }}
{{- end }}
