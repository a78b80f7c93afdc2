module devinject.io/containerd-build

go 1.26.8

require github.com/containerd/containerd/v2 v2.3.7
