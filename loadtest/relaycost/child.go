//go:build linux

package relaycost

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/mrgw/mrgw/config"
	"github.com/mrgw/mrgw/gateway"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/metaroce"
)

// GatewayArgs are the arguments of the mrgw-lab binary that run
// RunGateway: the load test starts each gateway as `BIN GatewayArgs...
// --config FILE` unless it is given the mrgw daemon.
var GatewayArgs = []string{"loadtest", "relay-cost", "gateway"}

// RunGateway is one gateway process of the load test: what `mrgw run
// --pprof` runs (the configuration file, the Go memory limit the daemon
// sets, the same gateway), with one difference, the paths' smallest probe
// timeout. The daemon's is 50 µs, for a data-center fabric; here the
// WAN's round trip is loopback's, and on a machine shared with the hosts
// and the other gateway a goroutine waits milliseconds for a core: with
// 50 µs a tenth of the WAN's datagrams were retransmitted on timeouts
// that were spurious, and the cost measured was of those. lab.LANMinPTO
// is what the in-process lab gives its gateways for the same reason. It
// runs until ctx ends.
func RunGateway(ctx context.Context, cfgPath string, log io.Writer) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	debug.SetMemoryLimit(gateway.MemoryLimit(cfg))
	g, err := gateway.New(cfg, gateway.Options{LogOutput: log, Pprof: true, Protocol: func(p *metaroce.Config) {
		p.Path.MinPTO = lab.LANMinPTO
	}})
	if err != nil {
		return fmt.Errorf("relaycost: gateway: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		g.Close()
		<-done
		return nil
	}
}
