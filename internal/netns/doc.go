// Package netns holds the network-namespace helpers the loopback load tests
// share (loadtest/tunemu's TUN emulator and loadtest/datapath's veth link):
// running iproute2's ip with a time limit, deleting the namespaces a killed
// run left behind, and running a function on an OS thread inside a named
// namespace. They lived twice, as copies, in the two packages; the load-test
// floor cannot import one load test from another, so they sit here, beneath
// both.
//
// The namespaces themselves are the callers' business: each caller names
// its namespaces prefix + site + "-" + pid + "-" + n, with a prefix of its
// own, so that CleanStale(prefix) removes only what a dead process of that
// caller created and never a live run's (or another tool's) namespaces.
//
// Creating and entering namespaces needs root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN); nothing here checks for it, the callers say why they
// cannot run. The daemon never links this package (internal/layering).
//
// This package imports only the standard library and golang.org/x/sys.
package netns
