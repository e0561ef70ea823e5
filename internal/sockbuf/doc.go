// Package sockbuf sizes a UDP socket's kernel buffers. A gateway asks for
// megabytes so that a burst from many peers at once is not dropped (which
// they read as dead paths, or dead members), but the kernel silently caps
// an ordinary request at net.core.rmem_max and wmem_max (208 KiB on most
// distributions). Where the process has CAP_NET_ADMIN the buffers are
// forced past the caps (SO_RCVBUFFORCE, SO_SNDBUFFORCE, as quic-go asks);
// elsewhere the caps stand, and Granted tells the caller what it got.
//
// It imports only the standard library and x/sys.
package sockbuf
