// Package helm only pins helm.sh/helm/v3; scripts/k8s-build builds its
// command with `go build helm.sh/helm/v3/cmd/helm` (a `tool` of this module).
package helm
