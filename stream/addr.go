package stream

import (
	"fmt"
	"strconv"
	"strings"
)

// Addr is a stream endpoint: an endpoint name in a region and a port.
type Addr struct {
	Region, Endpoint string
	Port             uint16
}

// Network returns "mrgw".
func (a Addr) Network() string { return "mrgw" }

// String returns REGION/ENDPOINT:PORT.
func (a Addr) String() string {
	return a.Region + "/" + a.Endpoint + ":" + strconv.Itoa(int(a.Port))
}

// ParseAddr parses REGION/ENDPOINT:PORT, the form Dial takes.
func ParseAddr(s string) (Addr, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return Addr{}, fmt.Errorf("stream: address %q: want REGION/ENDPOINT:PORT", s)
	}
	port, err := ParsePort(s[i+1:])
	if err != nil {
		return Addr{}, fmt.Errorf("stream: address %q: %w", s, err)
	}
	region, endpoint, ok := strings.Cut(s[:i], "/")
	if !ok || region == "" || endpoint == "" || len(region) > 255 || len(endpoint) > 255 || strings.Contains(endpoint, "/") {
		return Addr{}, fmt.Errorf("stream: address %q: want REGION/ENDPOINT:PORT", s)
	}
	return Addr{Region: region, Endpoint: endpoint, Port: port}, nil
}

// ParsePort parses a port number, 1 to 65535.
func ParsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("port %q: want a number from 1 to 65535", s)
	}
	return uint16(p), nil
}
