// Package deps pins the project's chosen third-party modules in go.mod while
// the packages that use them are being written. It is removed once every
// module is imported by real code.
package deps

import (
	_ "github.com/hashicorp/memberlist"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/quic-go/quic-go"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	_ "github.com/xtaci/kcp-go/v5"
	_ "go.uber.org/goleak"
	_ "golang.org/x/net/ipv4"
	_ "golang.org/x/net/ipv6"
	_ "golang.org/x/sys/unix"
	_ "gonum.org/v1/plot"
	_ "gonum.org/v1/plot/plotter"
	_ "gonum.org/v1/plot/vg"
)
