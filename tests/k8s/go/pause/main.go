// Command pause is the pod sandbox's process, as registry.k8s.io/pause is:
// it holds the pod's namespaces, reaps orphaned children (it is PID 1 of the
// pod when the PID namespace is shared) and exits on SIGINT or SIGTERM.
// Built by scripts/k8s-images into the image the test containerd uses as its
// sandbox image, since no image registry is reachable from the test machines.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
