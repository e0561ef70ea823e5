//go:build linux

package stream_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/mrgw/mrgw/host"
	"github.com/mrgw/mrgw/loadtest/lab"
	"github.com/mrgw/mrgw/stream"
)

// exampleHost registers a host named name in region with the lab's
// gateways of that region and runs a Mux on it.
func exampleHost(l *lab.Lab, name, region string) (*stream.Mux, func()) {
	h, err := host.New(host.Config{Name: name, Region: region, Gateways: l.HostGateways(region), Key: l.HostKey})
	if err != nil {
		log.Fatal(err)
	}
	m, err := stream.New(h, stream.Config{})
	if err != nil {
		log.Fatal(err)
	}
	return m, func() { m.Close(); h.Close() }
}

// exampleLab starts two regions of gateways in this process.
func exampleLab(ctx context.Context) *lab.Lab {
	l, err := lab.New(ctx, lab.Config{Direct: true})
	if err != nil {
		log.Fatal(err)
	}
	l.Start()
	if err := l.WaitReady(ctx); err != nil {
		log.Fatal(err)
	}
	return l
}

// A server in us-east answers in upper case what a client in eu-west
// sends it; the client half-closes, reads the answer to EOF, and closes.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := exampleLab(ctx)
	defer l.Close()

	server, stop := exampleHost(l, "trainer-0", lab.RegionB)
	defer stop()
	ln, err := server.Listen("7000")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		c.Write([]byte(strings.ToUpper(string(b))))
	}()

	client, stop := exampleHost(l, "loader-0", lab.RegionA)
	defer stop()
	c, err := client.Dial(ctx, "us-east/trainer-0:7000")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello, us-east"))
	c.CloseWrite()
	answer, err := io.ReadAll(c)
	fmt.Printf("%s %v\n", answer, err)
	// Output: HELLO, US-EAST <nil>
}

// A dial to a port nothing listens on is refused at once.
func ExampleMux_Dial_refused() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := exampleLab(ctx)
	defer l.Close()
	_, stop := exampleHost(l, "trainer-0", lab.RegionB)
	defer stop()
	client, stop := exampleHost(l, "loader-0", lab.RegionA)
	defer stop()

	_, err := client.Dial(ctx, "us-east/trainer-0:7999")
	fmt.Println(err)
	// Output: stream: dial us-east/trainer-0:7999: stream: connection reset by the peer (nothing listens on the port)
}
