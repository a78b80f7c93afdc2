module devinject.io/containerd-build

go 1.25.0

require github.com/containerd/containerd/v2 v2.2.9
