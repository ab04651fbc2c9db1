// The CoreDNS of the real node (hack/lib/real-node.sh): CoreDNS with only the plugins the node's
// Corefile uses, built from the Go module registry (CoreDNS's documented way to build a smaller
// plugin set: import coremain and the plugins, and set dnsserver.Directives in plugin.cfg's
// order). The cloud back-ends of the stock build (route53, azure, clouddns) are left out.
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
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
)

// Directives: plugin.cfg's order, restricted to the plugins above.
var directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes", "loop", "forward"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
