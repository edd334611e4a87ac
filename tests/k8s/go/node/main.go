// Command squall-node is a multi-call binary holding a Kubernetes node's
// programs (kubelet, kube-proxy), built from the k8s.io/kubernetes module at
// the release the control plane (../kube) is built from. The real-node test
// cluster (tests/k8s/realnode.py) runs them.
//
// It picks the program from the name it was started under (scripts/k8s-build
// makes symlinks kubelet and kube-proxy), or from its first argument:
// `squall-node kubelet --help`. A module of its own, apart from squall-kube,
// so that adding the node changed neither that binary nor its build.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var programs = map[string]func() int{
	// the same as k8s.io/kubernetes/cmd/kubelet and cmd/kube-proxy
	"kubelet":    func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy": func() int { return cli.Run(proxy.NewProxyCommand()) },
}

func lookup(name string) (func() int, bool) {
	name = strings.TrimSuffix(filepath.Base(name), ".exe")
	if p, ok := programs[name]; ok {
		return p, true
	}
	p, ok := programs["kube-"+name]
	return p, ok
}

func main() {
	if p, ok := lookup(os.Args[0]); ok {
		os.Exit(p())
	}
	if len(os.Args) > 1 {
		if p, ok := lookup(os.Args[1]); ok {
			os.Args = append([]string{filepath.Base(os.Args[1])}, os.Args[2:]...)
			os.Exit(p())
		}
	}
	fmt.Fprintln(os.Stderr, "usage: squall-node {kubelet|proxy} [flags]")
	fmt.Fprintln(os.Stderr, "   or: run it through a symlink named kubelet or kube-proxy")
	os.Exit(2)
}
