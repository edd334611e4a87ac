// Command coredns is CoreDNS (v1.14.7, pinned by go.mod; kubeadm of Kubernetes
// v1.36 names v1.14.2) with only the plugins the test cluster's DNS
// uses (the kubernetes plugin serving cluster.local from the API server, and
// what a kubeadm Corefile lists besides). Built by scripts/k8s-build from the
// Go module proxy, as no image registry is reachable from the test machines;
// the real-node cluster runs it as a host process on the node network.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order in which the plugins handle a query (a subset of CoreDNS's
// plugin.cfg, in its order).
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
	"forward",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
