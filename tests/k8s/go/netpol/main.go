// Command netpol is the NetworkPolicy agent of the real-node test cluster
// (tests/k8s/realnode.py runs one per node, as a host process beside the
// kubelet): the policy controller of sigs.k8s.io/kube-network-policies
// (v0.8.0, pinned by go.mod; SIG Network's per-node agent), which reads Pods,
// Namespaces and NetworkPolicies from the API server and gives a verdict,
// accept or drop, on the first packet of every connection handed to it on an
// nfqueue.
//
// Upstream's own command only runs in a pod (in-cluster config); this one
// takes a kubeconfig, the node's name and the queue, since the test nodes are
// host processes sharing one network namespace.
//
// What it does not do here: hand packets to the queue. The controller writes
// an nftables table whose rules use the `queue` expression, and the test
// machines' kernel is built without it (CONFIG_NFT_QUEUE is not set, so the
// whole batch is refused and the table never exists). The kernel does have
// the xtables NFQUEUE target, so realnode.py writes the equivalent iptables
// rules (new connections to or from the node's pod range go to this agent's
// queue) and the controller's failed nftables sync is only logged.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	os.Exit(run())
}

func run() int {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the agent's identity (required)")
	node := flag.String("hostname-override", "", "the name of the Node this agent serves (required)")
	queue := flag.Int("nfqueue-id", 100, "the nfqueue the node's rules send packets to")
	metrics := flag.String("metrics-bind-address", "127.0.0.1:9080", "address of /metrics")
	failOpen := flag.Bool("fail-open", true, "accept packets the agent cannot take (queue full, unparsable)")
	logCfg := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(logCfg, flag.CommandLine)
	flag.Parse()
	logs.InitLogs()
	defer logs.FlushLogs()
	if err := logsapi.ValidateAndApply(logCfg, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *kubeconfig == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "netpol: --kubeconfig and --hostname-override are required")
		return 2
	}
	if _, _, err := net.SplitHostPort(*metrics); err != nil {
		fmt.Fprintf(os.Stderr, "netpol: --metrics-bind-address: %v\n", err)
		return 2
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.ErrorS(err, "reading the kubeconfig")
		return 1
	}
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	config.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.ErrorS(err, "making the API client")
		return 1
	}
	factory := informers.NewSharedInformerFactory(client, 0)

	http.Handle("/metrics", promhttp.Handler())
	srv := &http.Server{Addr: *metrics}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			klog.ErrorS(err, "metrics server")
		}
	}()

	// NRI stays on as upstream has it: with it off, v0.8.0 dereferences its nil
	// plugin for a packet whose address is no known pod's. Containerd 1.6 serves
	// no NRI socket, so the plugin logs that it cannot connect and the pod
	// addresses come from the API server alone.
	controller, err := networkpolicy.NewController(
		client,
		factory.Networking().V1().NetworkPolicies(),
		factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(),
		nil, nil, nil, nil, // no (Baseline)AdminNetworkPolicy
		networkpolicy.Config{
			FailOpen:            *failOpen,
			QueueID:             *queue,
			NodeName:            *node,
			NetfilterBug1766Fix: false, // fixed in the kernels this runs on (6.12+)
			NFTableName:         "squall-netpol-" + *node,
		},
	)
	if err != nil {
		klog.ErrorS(err, "making the network policy controller")
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx) }()
	factory.Start(ctx.Done())

	select {
	case <-ctx.Done():
		err = <-done
	case err = <-done: // the queue could not be opened
	}
	_ = srv.Close()
	if err != nil {
		klog.ErrorS(err, "network policy controller")
		return 1
	}
	return 0
}
