// The pod sandbox's pause process for the real node (hack/lib/real-node.sh): it holds the pod's
// namespaces and waits for SIGTERM/SIGINT. Built static (CGO_ENABLED=0) into a one-file image,
// because there is no registry to pull registry.k8s.io/pause from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGCHLD)
	<-stop
}
