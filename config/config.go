// Package config is the mrgw gateway's configuration: one struct tree, how it
// is loaded (a YAML or TOML file, MRGW_* environment variables, command-line
// flags), the defaults, strict validation, and which settings may change while
// the daemon runs.
//
// # Sources and precedence
//
// From lowest to highest priority:
//
//  1. the defaults in [Default] (the only place defaults are written down);
//  2. the configuration file, YAML (.yaml, .yml) or TOML (.toml) by extension;
//  3. environment variables: MRGW_ followed by the key in upper case with "."
//     replaced by "_" (wan.paths_per_peer → MRGW_WAN_PATHS_PER_PEER). Lists of
//     strings are comma-separated. Lists of tables (wan.planes, regions,
//     scheduler.classes) can only be set in the file;
//  4. command-line flags named exactly like the keys (--wan.mtu=9000), see
//     [BindFlags] and [WithFlags]. Only flags the user actually set override.
//
// # Strictness
//
// A misspelt key is an error, not a silently ignored line: the file is decoded
// with viper's UnmarshalExact and every problem is reported with its key
// (wan.planes[1].local, regions[0].gateways[1].control). [Load] and [Check]
// collect every problem they can find instead of stopping at the first, so an
// operator fixes a file in one round.
//
// # Relative paths
//
// File paths in the configuration (control.tls.*) that are relative are
// resolved against the directory of the configuration file, whichever source
// (file, environment, flag) supplied them, so a configuration directory can be
// moved as a whole. [Load] stores the resolved, absolute paths in the Config.
//
// # Live reload
//
// Only some settings may change while the daemon runs (log.level, limits.*,
// scheduler.*, lan.max_rate_bps, lan.host_keys,
// lan.allow_unauthenticated_hosts, wan.key_rotation, wan.max_rate_bps,
// wan.region_rate_bps, control.deny, gossip.keyring: the keys tagged
// reload:"live"); [Reloadable] compares two configurations and refuses a
// reload that touches anything else, naming the key. docs/CONFIG.md explains
// each choice.
//
// The package only describes and checks configuration: it opens no sockets,
// parses no certificates and must never import the packages that do (tunnel,
// region, gateway); they read the Config instead.
package config

import "time"

// Config is the whole configuration of one gateway daemon.
//
// Struct tags: mapstructure names the key; doc is the one-line description
// used for flag help and docs/CONFIG.md; reload:"live" marks a key (or every
// key of a section) that may change without a restart, see [Reloadable].
type Config struct {
	Node      Node      `mapstructure:"node"`
	LAN       LAN       `mapstructure:"lan"`
	WAN       WAN       `mapstructure:"wan"`
	Control   Control   `mapstructure:"control"`
	Regions   []Region  `mapstructure:"regions" doc:"optional: pins and overrides for remote regions (never its own region); gossip finds every region and its gateways without it"`
	Gossip    Gossip    `mapstructure:"gossip"`
	Limits    Limits    `mapstructure:"limits" reload:"live"`
	Scheduler Scheduler `mapstructure:"scheduler" reload:"live"`
	Admin     Admin     `mapstructure:"admin"`
	Log       Log       `mapstructure:"log"`

	// Path is the file this configuration was loaded from ("" when it came
	// from [Parse]). It is not a configuration key.
	Path string `mapstructure:"-"`
}

// Node identifies this gateway.
type Node struct {
	Name   string `mapstructure:"name" doc:"unique gateway name; also its gossip member name and the name peers expect in its certificate"`
	Region string `mapstructure:"region" doc:"the region this gateway serves"`
	// Capacity is announced in gossip; placement weighs it.
	Capacity int `mapstructure:"capacity" doc:"this gateway's capacity relative to its region's other gateways, announced in gossip: flows are placed on a region's gateways in proportion, 0..65535 (0: 100, the default)"`
}

// LAN is the host-facing side: MetaRoCE from hosts in this region.
type LAN struct {
	Listen            string `mapstructure:"listen" doc:"UDP ip:port where hosts send MetaRoCE traffic"`
	CongestionControl string `mapstructure:"congestion_control" doc:"data-center controller for host connections: dc-aimd or fixed"`
	MaxRateBps        int64  `mapstructure:"max_rate_bps" reload:"live" doc:"pacing ceiling per host connection in bit/s; 0 means none; required by the fixed controller"`
	// HostKeys are the host credentials (hostkeys.go).
	HostKeys []string `mapstructure:"host_keys" reload:"live" doc:"host credentials, each ID:BASE64 (a secret of 16 to 64 bytes); a host's REGISTER must carry a MAC under one of them; required unless allow_unauthenticated_hosts"`
	// AllowUnauthenticatedHosts is the explicit opt-out of host
	// authentication: without it an empty host_keys is a configuration
	// error, so that a gateway never admits anyone by omission.
	AllowUnauthenticatedHosts bool `mapstructure:"allow_unauthenticated_hosts" reload:"live" doc:"accept host registrations without a credential when host_keys is empty (a lab on one machine only: anyone who reaches lan.listen can then register any endpoint name)"`
	// MaxHosts bounds the hosts (LAN peers) admitted at once
	// (docs/OPERATIONS.md, "Host capacity").
	MaxHosts int `mapstructure:"max_hosts" doc:"hosts (LAN peers) admitted at once, 1..65536; each costs about 64 KiB (its connection's state and the gateway's tables), counted in the Go memory limit mrgw run sets; more are refused at once (admission full)"`
}

// WAN is the inter-region side: encrypted multipath tunnels to peer gateways.
type WAN struct {
	Planes            []Plane       `mapstructure:"planes" doc:"the network planes this gateway sends and receives tunnel datagrams on"`
	PathsPerPeer      int           `mapstructure:"paths_per_peer" doc:"parallel paths (distinct UDP source ports) per peer gateway, 1..1024"`
	MTU               int           `mapstructure:"mtu" doc:"largest tunnel datagram payload in bytes, 512..65000"`
	CongestionControl string        `mapstructure:"congestion_control" doc:"long-RTT controller: longrtt-htcp, longrtt-scalable or fixed"`
	MaxRateBps        int64         `mapstructure:"max_rate_bps" reload:"live" doc:"the gateway's WAN capacity in bit/s on the wire (IP, UDP and the AEAD envelope included: the gateway paces its datagrams' content at the share they leave), shared max-min by all its peer connections (each paces at most its share); 0 means none; the fixed controller requires it or region_rate_bps"`
	RegionRateBps     int64         `mapstructure:"region_rate_bps" reload:"live" doc:"the WAN capacity in bit/s on the wire that this region's gateways share (one link, or one rate bought for the region): split by demand among the region's live gateways in gossip, every 250 ms, max-min by node.capacity (an idle gateway keeps 1/8 of its node.capacity's part, a busy one takes the rest; all busy: by node.capacity), re-divided when one joins, dies or leaves; the smaller of that part and max_rate_bps when both are set; give every gateway of the region the same value; 0 means none"`
	ECN               bool          `mapstructure:"ecn" doc:"send ECT(0) and read CE marks on WAN datagrams"`
	ClassicFallback   bool          `mapstructure:"classic_fallback" doc:"answer ECN marks as CUBIC does and keep 3% of the WAN rate free, so classic-ECN traffic sharing a marking queue keeps its share; costs at least that 3% on a link mrgw has to itself, much more on a host that holds the sender off for milliseconds (docs/OPERATIONS.md)"`
	GSO               bool          `mapstructure:"gso" doc:"use UDP generic segmentation offload when the kernel supports it"`
	GRO               bool          `mapstructure:"gro" doc:"use UDP generic receive offload when the kernel supports it"`
	Cipher            string        `mapstructure:"cipher" doc:"datagram AEAD: aes-128-gcm, aes-256-gcm or chacha20-poly1305"`
	KeyRotation       time.Duration `mapstructure:"key_rotation" reload:"live" doc:"how often peers derive fresh datagram keys, 1s..24h"`
	DeadAfter         time.Duration `mapstructure:"dead_after" doc:"a peer gateway that has answered nothing this long while waited on (it is PINGed every dead_after/8), or a peer gateway or host whose paths have all been down this long, is declared gone, and its flows fail over, 100ms..60s"`
}

// Plane is one network plane as seen from this gateway.
type Plane struct {
	Name  string `mapstructure:"name" doc:"plane name, unique in this file"`
	Local string `mapstructure:"local" doc:"UDP ip:port this plane receives tunnel datagrams on; paths send from the same IP with their own source ports"`
	// Advertise is what gossip announces for the plane, when peers reach
	// it at another address than Local (NAT, a load balancer, the lab's
	// link emulator).
	Advertise string `mapstructure:"advertise" doc:"ip:port peers send this plane's tunnel datagrams to, announced in gossip; empty means local, which must then be a specific address"`
}

// Announced is the address gossip announces for the plane: Advertise, else
// Local (which validation requires to be a specific address then).
func (p Plane) Announced() string {
	if p.Advertise != "" {
		return p.Advertise
	}
	return p.Local
}

// Control is the QUIC control channel between peer gateways.
type Control struct {
	Listen string `mapstructure:"listen" doc:"UDP ip:port of the QUIC control listener"`
	// Advertise is what gossip announces as the control address, when
	// other gateways dial it at another address than Listen (a wildcard
	// listen address, NAT, a load balancer).
	Advertise string   `mapstructure:"advertise" doc:"ip:port other gateways dial this gateway's control listener at, announced in gossip; empty means control.listen, which must then be a specific address"`
	TLS       TLS      `mapstructure:"tls"`
	PeerNames []string `mapstructure:"peer_names" doc:"optional allow-list of peer gateway names; empty means every gateway whose certificate chains to the CA and matches what it announces in gossip"`
	// Deny is the revocation list (live): entries refuse a peer gateway
	// by name, by region and name, every gateway of a region, or by
	// certificate serial number.
	Deny []string `mapstructure:"deny" reload:"live" doc:"peer gateways refused whatever their certificate: NAME, REGION/NAME, REGION/* or serial:HEX (the certificate's serial number); sessions already up with a denied gateway end on reload"`
}

// Announced is the address gossip announces for the control listener:
// Advertise, else Listen (which validation requires to be a specific
// address then).
func (c Control) Announced() string {
	if c.Advertise != "" {
		return c.Advertise
	}
	return c.Listen
}

// TLS names the files for mutual TLS on the control channel. The files are
// checked for existence and readability here; their contents are parsed by
// the tunnel package (tunnel/pki: LoadCredentials at start, CheckFiles in
// `mrgw config check`).
type TLS struct {
	CAFile   string `mapstructure:"ca_file" doc:"PEM file of the CA that signs every gateway's certificate"`
	CertFile string `mapstructure:"cert_file" doc:"PEM certificate of this gateway"`
	KeyFile  string `mapstructure:"key_file" doc:"PEM private key of this gateway"`
}

// Region is a remote region as this gateway's configuration pins it. Gossip
// finds every region and its gateways without it; an entry adds what
// gossip does not say (rtt_hint), overrides what it does (a gateway's
// addresses or weight), and makes the region and its listed gateways
// expected (a listed gateway never seen is reported).
type Region struct {
	Name     string          `mapstructure:"name" doc:"region name, unique, not this gateway's region"`
	RTTHint  time.Duration   `mapstructure:"rtt_hint" doc:"expected round trip to the region, seeds the controllers before the first sample; 0 means measure"`
	Gateways []RemoteGateway `mapstructure:"gateways" doc:"optional: gateways of that region expected in gossip, with overrides of what they announce"`
}

// RemoteGateway is one gateway of a remote region: expected in gossip (and
// reported while it is not seen), with overrides of what it announces.
type RemoteGateway struct {
	Name    string   `mapstructure:"name" doc:"the gateway's node.name (and certificate name)"`
	Control string   `mapstructure:"control" doc:"optional: host:port of its QUIC control listener, instead of the one it announces"`
	WAN     []string `mapstructure:"wan" doc:"optional: host:port of each of its planes, instead of the ones it announces"`
	Weight  int      `mapstructure:"weight" doc:"optional: its placement weight instead of its announced capacity (node.capacity), 0..65535; 0 means the announced one"`
}

// Gossip configures membership and path-health gossip (hashicorp/memberlist).
type Gossip struct {
	Bind           string        `mapstructure:"bind" doc:"ip:port for gossip, TCP and UDP"`
	Advertise      string        `mapstructure:"advertise" doc:"ip:port announced to other members; empty means gossip.bind"`
	Seeds          []string      `mapstructure:"seeds" doc:"host:port of members to join at start"`
	Keyring        []string      `mapstructure:"keyring" reload:"live" doc:"base64 keys of 16, 24 or 32 bytes; the first encrypts, all decrypt; empty means no encryption"`
	Profile        string        `mapstructure:"profile" doc:"failure-detection timings: wan, lan or custom"`
	ProbeInterval  time.Duration `mapstructure:"probe_interval" doc:"custom profile only: interval between failure probes"`
	ProbeTimeout   time.Duration `mapstructure:"probe_timeout" doc:"custom profile only: wait for a probe ack, less than probe_interval"`
	SuspicionMult  int           `mapstructure:"suspicion_mult" doc:"custom profile only: suspicion timeout multiplier, 1..100"`
	GossipInterval time.Duration `mapstructure:"gossip_interval" doc:"custom profile only: interval between gossip rounds"`
}

// Limits bounds what a gateway holds, so a slow receiver pushes back through
// credits instead of growing the gateway's memory.
type Limits struct {
	MemoryBytes     int64 `mapstructure:"memory_bytes" doc:"bytes of buffered data the gateway may hold in total, 1 MiB..1 TiB"`
	MaxFlows        int   `mapstructure:"max_flows" doc:"concurrent host flows admitted, 1..1000000"`
	FlowCreditBytes int64 `mapstructure:"flow_credit_bytes" doc:"credit granted to one flow, wan.mtu..limits.memory_bytes"`
}

// Scheduler shares WAN capacity between traffic classes by weight.
type Scheduler struct {
	DefaultClass string  `mapstructure:"default_class" doc:"class for flows that name no class or an unknown one"`
	Classes      []Class `mapstructure:"classes" doc:"traffic classes (tenants or job kinds) with their weights"`
}

// Class is one scheduling class.
type Class struct {
	Name   string `mapstructure:"name" doc:"class name, unique"`
	Weight int    `mapstructure:"weight" doc:"share of WAN capacity relative to the other classes, 1..1000000"`
}

// Admin is the HTTP endpoint for /metrics, /healthz, /readyz and /status.
type Admin struct {
	Listen string `mapstructure:"listen" doc:"TCP ip:port of the admin HTTP server; empty disables it"`
}

// Log configures the daemon's log output.
type Log struct {
	Level  string `mapstructure:"level" reload:"live" doc:"debug, info, warn or error"`
	Format string `mapstructure:"format" doc:"text or json"`
}
