package metrics

// Path MTU discovery: its own block, so that it stays apart from the rest
// of the catalogue.

func (b *builder) pmtu() {
	b.m.PathMTU = b.gaugeVec("mrgw_path_mtu_bytes",
		"Path MTU validated by packetization-layer path MTU discovery on the plane towards the peer: the largest IP packet (tunnel datagram plus IP and UDP headers) known to cross, in bytes. It starts at the base (a 1200-byte datagram) and is capped by wan.mtu; data uses the plane only when it holds a full data datagram.",
		wanLabels...)
}

// SetPathMTU sets the path MTU validated on a plane towards peer.
func (m *Metrics) SetPathMTU(peer, peerRegion, plane string, bytes int) {
	m.PathMTU.WithLabelValues(peer, peerRegion, plane).Set(float64(bytes))
}
