package config

import "time"

// Default returns the configuration every key starts from. It is the only
// place defaults are written down: [Load] feeds it to viper key by key and
// docs/CONFIG.md is checked against it.
//
// Listen addresses default to loopback so that a daemon started with a
// half-written file never exposes a port on a public interface; a real
// deployment sets them. Keys without a sensible default (node.*, wan.planes,
// control.tls.*) are left empty and [Config.Validate] asks for them.
func Default() *Config {
	return &Config{
		// Equal capacities by default: a region's gateways share its
		// flows evenly.
		Node: Node{Capacity: 100},
		LAN: LAN{
			// 4791 is the RoCEv2 UDP port that MetaRoCE hosts already use.
			Listen:            "127.0.0.1:4791",
			CongestionControl: LANControllerAIMD,
			// Hosts share the gateway's path sockets; what each costs is
			// its connection's protocol state and the gateway's tables
			// (about 70 KiB of RSS each at 1,000 hosts, docs/results/reliability.md):
			// 10,000 hold about 640 MiB beside limits.memory_bytes.
			MaxHosts: 10_000,
		},
		WAN: WAN{
			PathsPerPeer: 16,
			// 1024 bytes of payload make a full data datagram of 1128
			// bytes (76 header, 28 envelope), under the 1200 bytes that
			// every path carries (QUIC's minimum; the IPv6 minimum MTU,
			// 1280, less 48 bytes of headers), with room for a header
			// that grows. It works on any WAN; raise it where every plane
			// carries more (path MTU discovery shows what each plane
			// carries, and keeps data off a plane too small for it).
			MTU:               1024,
			CongestionControl: WANControllerHTCP,
			ECN:               true,
			GSO:               true,
			GRO:               true,
			// AES-128-GCM: about 310 ns per packet sealed with AES-NI on
			// the reference machine, against 640 ns for ChaCha20-Poly1305.
			Cipher:      CipherAES128GCM,
			KeyRotation: time.Hour,
			// Added to the timeouts that take each path down first: a dead
			// peer gateway's flows move in about a second.
			DeadAfter: 500 * time.Millisecond,
		},
		Control: Control{
			Listen: "127.0.0.1:7443",
		},
		Gossip: Gossip{
			Bind:    "127.0.0.1:7946",
			Profile: GossipProfileWAN,
		},
		Limits: Limits{
			// 1 GiB holds the bandwidth-delay product of 10 Gbit/s at
			// 100 ms (125 MB) several times over.
			MemoryBytes: 1 << 30,
			// Every open flow reserves its credit from memory_bytes, so
			// memory / credit flows can be open at once (relay.open):
			// the default admits exactly what the default memory holds.
			// Raise memory_bytes, or lower flow_credit_bytes, for more.
			MaxFlows:        256,
			FlowCreditBytes: 4 << 20,
		},
		Scheduler: Scheduler{
			DefaultClass: "default",
			Classes:      []Class{{Name: "default", Weight: 1}},
		},
		Admin: Admin{Listen: "127.0.0.1:9464"},
		Log:   Log{Level: LogInfo, Format: LogText},
	}
}

// Names the configuration accepts for its enumerated keys. The packages that
// implement them (cc, cc/longrtt, tunnel, region) map these names onto their
// constructors; a name is added here when its implementation lands.
const (
	// LANControllerAIMD is the data-center controller of package cc:
	// ECN-driven AIMD with receiver rate hints.
	LANControllerAIMD = "dc-aimd"
	// LANControllerFixed sends at lan.max_rate_bps; for tests and baselines.
	LANControllerFixed = "fixed"

	// WANControllerHTCP grows its window with time since the last decrease,
	// not with round trips, so a 100 ms path is not starved by a 10 ms one.
	WANControllerHTCP = "longrtt-htcp"
	// WANControllerScalable is a scalable (multiplicative) increase for very
	// large bandwidth-delay products.
	WANControllerScalable = "longrtt-scalable"
	// WANControllerFixed sends at the gateway's WAN rate (wan.max_rate_bps,
	// its part of wan.region_rate_bps); for tests and baselines.
	WANControllerFixed = "fixed"

	CipherAES128GCM        = "aes-128-gcm"
	CipherAES256GCM        = "aes-256-gcm"
	CipherChaCha20Poly1305 = "chacha20-poly1305"

	GossipProfileWAN    = "wan"
	GossipProfileLAN    = "lan"
	GossipProfileCustom = "custom"

	LogDebug = "debug"
	LogInfo  = "info"
	LogWarn  = "warn"
	LogError = "error"

	LogText = "text"
	LogJSON = "json"
)

var (
	lanControllers = []string{LANControllerAIMD, LANControllerFixed}
	wanControllers = []string{WANControllerHTCP, WANControllerScalable, WANControllerFixed}
	ciphers        = []string{CipherAES128GCM, CipherAES256GCM, CipherChaCha20Poly1305}
	gossipProfiles = []string{GossipProfileWAN, GossipProfileLAN, GossipProfileCustom}
	logLevels      = []string{LogDebug, LogInfo, LogWarn, LogError}
	logFormats     = []string{LogText, LogJSON}
)

// Bounds checked by Validate. They are constants rather than keys: moving
// them is a code change with its own review.
const (
	minMTU = 512
	// 65,507 bytes is the largest UDP payload over IPv4; the rest is left for
	// the tunnel header and the AEAD tag.
	maxMTU          = 65000
	minPathsPerPeer = 1
	maxPathsPerPeer = 1024
	maxPlanes       = 64
	minKeyRotation  = time.Second
	minDeadAfter    = 100 * time.Millisecond
	maxDeadAfter    = time.Minute
	maxKeyRotation  = 24 * time.Hour
	maxRTTHint      = 10 * time.Second
	minMemoryBytes  = 1 << 20
	// 1 TiB is far beyond any bandwidth-delay product a gateway buffers
	// (400 Gbit/s at 200 ms is 10 GB); more is a typo, and it keeps
	// products of limits well inside int64.
	maxMemoryBytes = 1 << 40
	maxFlows       = 1_000_000
	maxHosts       = 65536
	maxWeight      = 1_000_000
	// maxCapacity bounds node.capacity and regions[].gateways[].weight
	// (rendezvous placement weighs gateways of a region against each other).
	maxCapacity  = 65535
	maxSuspicion = 100
)

// GossipTimings are the failure-detection timings memberlist is given.
type GossipTimings struct {
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	GossipInterval time.Duration
}

// Timings returns the effective timings of the gossip profile: memberlist's
// DefaultWANConfig or DefaultLANConfig values (v0.7.0) for "wan" and "lan",
// the four keys for "custom". On loopback, "wan" notices a dead gateway in
// about 39 s, "lan" in about 6 s, and probe 200ms / timeout 100ms /
// suspicion 2 / gossip 50ms in under a second.
func (g Gossip) Timings() GossipTimings {
	switch g.Profile {
	case GossipProfileLAN:
		return GossipTimings{time.Second, 500 * time.Millisecond, 4, 200 * time.Millisecond}
	case GossipProfileCustom:
		return GossipTimings{g.ProbeInterval, g.ProbeTimeout, g.SuspicionMult, g.GossipInterval}
	default:
		return GossipTimings{5 * time.Second, 3 * time.Second, 6, 500 * time.Millisecond}
	}
}
