// Command etcd is etcd's own server entry point, built from the Go module
// proxy at the version the pinned Kubernetes release is tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
