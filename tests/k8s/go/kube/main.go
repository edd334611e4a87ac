// Command squall-kube is a multi-call binary holding the Kubernetes control
// plane (kube-apiserver, kube-controller-manager, kube-scheduler) and kubectl,
// all built from the k8s.io/kubernetes module at one pinned release.
//
// It picks the program from the name it was started under (scripts/k8s-build
// makes symlinks kube-apiserver, kube-controller-manager, kube-scheduler and
// kubectl), or from its first argument: `squall-kube apiserver --help`.
// One binary instead of four saves link time and disk on small machines.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	_ "time/tzdata" // for timeZone support in CronJob

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl: client auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var programs = map[string]func() int{
	"kube-apiserver": func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int {
		return cli.Run(controllermanager.NewControllerManagerCommand())
	},
	"kube-scheduler": func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubectl":        runKubectl,
}

func runKubectl() int {
	// Same as k8s.io/kubernetes/cmd/kubectl.
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	var command *cobra.Command = kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
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
	fmt.Fprintln(os.Stderr, "usage: squall-kube {apiserver|controller-manager|scheduler|kubectl} [flags]")
	fmt.Fprintln(os.Stderr, "   or: run it through a symlink named kube-apiserver, kube-controller-manager, kube-scheduler or kubectl")
	os.Exit(2)
}
