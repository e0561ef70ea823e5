package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validate checks c and returns every problem found, joined with errors.Join,
// each a [*FieldError] naming its key; nil means the configuration is usable.
// It also checks that the control.tls.* files exist and can be read (their
// contents are parsed by the tunnel package, not here). It does not resolve
// DNS names: a check must give the same answer offline.
func (c *Config) Validate() error {
	var errs []error
	for _, fe := range c.check(true) {
		errs = append(errs, fe)
	}
	return errors.Join(errs...)
}

// checker collects the problems of one configuration.
type checker struct {
	problems []*FieldError
	sockets  []socket // local sockets, for conflict checks
}

func (v *checker) add(key, format string, args ...any) {
	v.problems = append(v.problems, fieldErr(key, format, args...))
}

func (c *Config) check(files bool) []*FieldError {
	v := &checker{}
	v.name("node.name", c.Node.Name, true)
	v.name("node.region", c.Node.Region, true)
	v.intRange("node.capacity", int64(c.Node.Capacity), 0, maxCapacity)

	// LAN
	v.listen("lan.listen", c.LAN.Listen, protoUDP, false)
	v.oneOf("lan.congestion_control", c.LAN.CongestionControl, lanControllers)
	v.rate("lan.max_rate_bps", c.LAN.MaxRateBps, c.LAN.CongestionControl == LANControllerFixed, "lan.congestion_control")
	v.hostKeys("lan.host_keys", c.LAN.HostKeys)
	v.intRange("lan.max_hosts", int64(c.LAN.MaxHosts), 1, maxHosts)
	if len(c.LAN.HostKeys) == 0 && !c.LAN.AllowUnauthenticatedHosts {
		v.add("lan.host_keys", "is empty: hosts would register unauthenticated; give each host a credential (docs/OPERATIONS.md, \"Authenticating hosts\") or set lan.allow_unauthenticated_hosts: true")
	}

	// WAN
	c.checkPlanes(v)
	v.intRange("wan.paths_per_peer", int64(c.WAN.PathsPerPeer), minPathsPerPeer, maxPathsPerPeer)
	v.intRange("wan.mtu", int64(c.WAN.MTU), minMTU, maxMTU)
	v.oneOf("wan.congestion_control", c.WAN.CongestionControl, wanControllers)
	v.rate("wan.max_rate_bps", c.WAN.MaxRateBps, c.WAN.CongestionControl == WANControllerFixed && c.WAN.RegionRateBps == 0, "wan.congestion_control")
	v.rate("wan.region_rate_bps", c.WAN.RegionRateBps, false, "")
	v.oneOf("wan.cipher", c.WAN.Cipher, ciphers)
	if d := c.WAN.DeadAfter; d < minDeadAfter || d > maxDeadAfter {
		v.add("wan.dead_after", "%s is out of range %s..%s", fmtDur(d), fmtDur(minDeadAfter), fmtDur(maxDeadAfter))
	}
	if d := c.WAN.KeyRotation; d < minKeyRotation || d > maxKeyRotation {
		v.add("wan.key_rotation", "%s is out of range %s..%s", fmtDur(d), fmtDur(minKeyRotation), fmtDur(maxKeyRotation))
	}

	// Control channel
	ctl, _ := v.listen("control.listen", c.Control.Listen, protoUDP, false)
	v.advertise("control.advertise", c.Control.Advertise, "control.listen", c.Control.Listen, ctl,
		"which the other gateways cannot dial")
	if files {
		v.file("control.tls.ca_file", c.Control.TLS.CAFile)
		v.file("control.tls.cert_file", c.Control.TLS.CertFile)
		v.file("control.tls.key_file", c.Control.TLS.KeyFile)
	} else {
		for _, f := range []struct{ key, path string }{
			{"control.tls.ca_file", c.Control.TLS.CAFile},
			{"control.tls.cert_file", c.Control.TLS.CertFile},
			{"control.tls.key_file", c.Control.TLS.KeyFile},
		} {
			if f.path == "" {
				v.add(f.key, "is required")
			}
		}
	}
	peers := map[string]bool{}
	for i, n := range c.Control.PeerNames {
		key := fmt.Sprintf("control.peer_names[%d]", i)
		switch {
		case !v.name(key, n, true):
		case n == c.Node.Name:
			v.add(key, "%q is this gateway's own node.name", n)
		case peers[n]:
			v.add(key, "%q is listed twice", n)
		}
		peers[n] = true
	}

	for i, d := range c.Control.Deny {
		if err := CheckDenyEntry(d); err != nil {
			v.add(fmt.Sprintf("control.deny[%d]", i), "%v", err)
		}
	}

	c.checkRegions(v, peers)
	c.checkGossip(v)

	// Limits
	switch mb := c.Limits.MemoryBytes; {
	case mb < minMemoryBytes:
		v.add("limits.memory_bytes", "%d is less than the minimum %d (1 MiB)", mb, minMemoryBytes)
	case mb > maxMemoryBytes:
		v.add("limits.memory_bytes", "%d is more than the maximum %d (1 TiB)", mb, maxMemoryBytes)
	}
	v.intRange("limits.max_flows", int64(c.Limits.MaxFlows), 1, maxFlows)
	switch fc := c.Limits.FlowCreditBytes; {
	case fc < int64(c.WAN.MTU):
		v.add("limits.flow_credit_bytes", "%d is less than wan.mtu (%d): a flow could never send a full datagram", fc, c.WAN.MTU)
	case fc > c.Limits.MemoryBytes && c.Limits.MemoryBytes >= minMemoryBytes && c.Limits.MemoryBytes <= maxMemoryBytes:
		v.add("limits.flow_credit_bytes", "%d is more than limits.memory_bytes (%d)", fc, c.Limits.MemoryBytes)
	}

	// Scheduler
	classes := map[string]bool{}
	if len(c.Scheduler.Classes) == 0 {
		v.add("scheduler.classes", "needs at least one class")
	}
	for i, cl := range c.Scheduler.Classes {
		key := fmt.Sprintf("scheduler.classes[%d]", i)
		if v.name(key+".name", cl.Name, true) && classes[cl.Name] {
			v.add(key+".name", "%q is listed twice", cl.Name)
		}
		classes[cl.Name] = true
		if cl.Weight <= 0 || cl.Weight > maxWeight {
			v.add(key+".weight", "%d is out of range 1..%d", cl.Weight, maxWeight)
		}
	}
	if v.name("scheduler.default_class", c.Scheduler.DefaultClass, true) && len(classes) > 0 && !classes[c.Scheduler.DefaultClass] {
		v.add("scheduler.default_class", "%q is not one of scheduler.classes", c.Scheduler.DefaultClass)
	}

	v.listen("admin.listen", c.Admin.Listen, protoTCP, true)
	v.oneOf("log.level", c.Log.Level, logLevels)
	v.oneOf("log.format", c.Log.Format, logFormats)
	return v.problems
}

func (c *Config) checkPlanes(v *checker) {
	if len(c.WAN.Planes) == 0 {
		v.add("wan.planes", "needs at least one plane")
	}
	if len(c.WAN.Planes) > maxPlanes {
		v.add("wan.planes", "has %d planes, at most %d are supported", len(c.WAN.Planes), maxPlanes)
	}
	names := map[string]int{}
	for i, p := range c.WAN.Planes {
		key := fmt.Sprintf("wan.planes[%d]", i)
		if v.name(key+".name", p.Name, true) {
			if j, dup := names[p.Name]; dup {
				v.add(key+".name", "%q is also the name of wan.planes[%d]", p.Name, j)
			} else {
				names[p.Name] = i
			}
		}
		local, _ := v.listen(key+".local", p.Local, protoUDP, false)
		v.advertise(key+".advertise", p.Advertise, key+".local", p.Local, local,
			"where the peers cannot send datagrams")
	}
}

func (c *Config) checkRegions(v *checker, peers map[string]bool) {
	regions := map[string]int{}
	gateways := map[string]string{} // gateway name → key where first seen
	for i, r := range c.Regions {
		key := fmt.Sprintf("regions[%d]", i)
		if v.name(key+".name", r.Name, true) {
			if j, dup := regions[r.Name]; dup {
				v.add(key+".name", "%q is also the name of regions[%d]", r.Name, j)
			} else {
				regions[r.Name] = i
			}
			if r.Name == c.Node.Region {
				v.add(key+".name", "%q is this gateway's own region (node.region); list only remote regions", r.Name)
			}
		}
		if r.RTTHint < 0 || r.RTTHint > maxRTTHint {
			v.add(key+".rtt_hint", "%s is out of range 0s..%s", fmtDur(r.RTTHint), fmtDur(maxRTTHint))
		}
		for j, g := range r.Gateways {
			gkey := fmt.Sprintf("%s.gateways[%d]", key, j)
			if v.name(gkey+".name", g.Name, true) {
				switch first, dup := gateways[g.Name]; {
				case g.Name == c.Node.Name:
					v.add(gkey+".name", "%q is this gateway's own node.name", g.Name)
				case dup:
					v.add(gkey+".name", "%q is also the name of %s", g.Name, first)
				case len(peers) > 0 && !peers[g.Name]:
					v.add(gkey+".name", "%q is not in control.peer_names, so its control connection would be refused", g.Name)
				}
				if _, dup := gateways[g.Name]; !dup {
					gateways[g.Name] = gkey
				}
			}
			// control and wan are overrides of what the gateway announces
			// in gossip: optional, checked when given.
			if g.Control != "" {
				v.remote(gkey+".control", g.Control)
			}
			if g.Weight < 0 || g.Weight > maxCapacity {
				v.add(gkey+".weight", "%d is out of range 0..%d", g.Weight, maxCapacity)
			}
			switch planes := len(c.WAN.Planes); {
			case len(g.WAN) == 0:
			case planes > 0 && len(g.WAN) != planes:
				// Path i leaves from wan.planes[i mod n] and goes to
				// wan[i mod m]: with m != n paths cross planes.
				v.add(gkey+".wan", "has %s but wan.planes has %d: list one per plane, in the order of wan.planes, or paths cross from one plane to another", plural(len(g.WAN), "address", "addresses"), planes)
			}
			for k, a := range g.WAN {
				v.remote(fmt.Sprintf("%s.wan[%d]", gkey, k), a)
			}
		}
	}
}

func (c *Config) checkGossip(v *checker) {
	g := c.Gossip
	bind, bindOK := v.listen("gossip.bind", g.Bind, protoTCP|protoUDP, false)
	switch {
	case g.Advertise != "":
		if ap, ok := v.addr("gossip.advertise", g.Advertise, false); ok && ap.Addr().IsUnspecified() {
			v.add("gossip.advertise", "%q is the unspecified address; other members could not reach it", g.Advertise)
		}
	case bindOK && bind.Addr().IsUnspecified():
		v.add("gossip.advertise", "is required when gossip.bind (%q) listens on every interface: memberlist would guess which address to announce", g.Bind)
	}
	for i, s := range g.Seeds {
		v.remote(fmt.Sprintf("gossip.seeds[%d]", i), s)
	}
	seen := map[string]int{}
	for i, k := range g.Keyring {
		key := fmt.Sprintf("gossip.keyring[%d]", i)
		// Never quote a key: error messages end up in logs.
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(k))
		switch {
		case err != nil:
			v.add(key, "is not valid base64")
		case len(raw) != 16 && len(raw) != 24 && len(raw) != 32:
			v.add(key, "decodes to %d bytes; a key must be 16, 24 or 32 bytes (AES-128, -192 or -256)", len(raw))
		default:
			if j, dup := seen[string(raw)]; dup {
				v.add(key, "is the same key as gossip.keyring[%d]", j)
			} else {
				seen[string(raw)] = i
			}
		}
	}
	if !v.oneOf("gossip.profile", g.Profile, gossipProfiles) {
		return
	}
	timings := []struct {
		key string
		set bool
	}{
		{"gossip.probe_interval", g.ProbeInterval != 0},
		{"gossip.probe_timeout", g.ProbeTimeout != 0},
		{"gossip.suspicion_mult", g.SuspicionMult != 0},
		{"gossip.gossip_interval", g.GossipInterval != 0},
	}
	if g.Profile != GossipProfileCustom {
		for _, t := range timings {
			if t.set {
				v.add(t.key, "is only used with gossip.profile \"custom\" (the profile is %q)", g.Profile)
			}
		}
		return
	}
	for _, d := range []struct {
		key string
		val int64
	}{
		{"gossip.probe_interval", int64(g.ProbeInterval)},
		{"gossip.probe_timeout", int64(g.ProbeTimeout)},
		{"gossip.gossip_interval", int64(g.GossipInterval)},
	} {
		if d.val <= 0 {
			v.add(d.key, "must be positive with gossip.profile \"custom\"")
		}
	}
	if g.ProbeTimeout > 0 && g.ProbeTimeout >= g.ProbeInterval {
		v.add("gossip.probe_timeout", "%s is not less than gossip.probe_interval (%s)", fmtDur(g.ProbeTimeout), fmtDur(g.ProbeInterval))
	}
	v.intRange("gossip.suspicion_mult", int64(g.SuspicionMult), 1, maxSuspicion)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// fmtDur writes a duration as a person would: 24h, not 24h0m0s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// --- checks on single values ---

var nameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// name checks a name (gateway, region, plane, class). Names end up in
// certificates, gossip member names and metric labels, so they are kept to
// letters, digits, '.', '_' and '-', at most 63 characters.
func (v *checker) name(key, s string, required bool) bool {
	switch {
	case s == "":
		if required {
			v.add(key, "is required")
		}
		return false
	case !nameRE.MatchString(s):
		v.add(key, "%q is not a valid name (letters, digits, '.', '_', '-'; at most 63; starting and ending with a letter or digit)", s)
		return false
	}
	return true
}

func (v *checker) oneOf(key, s string, allowed []string) bool {
	if slices.Contains(allowed, s) {
		return true
	}
	if s == "" {
		v.add(key, "is required (one of %s)", strings.Join(allowed, ", "))
	} else {
		v.add(key, "%q is not one of %s", s, strings.Join(allowed, ", "))
	}
	return false
}

func (v *checker) intRange(key string, n, lo, hi int64) {
	if n < lo || n > hi {
		v.add(key, "%d is out of range %d..%d", n, lo, hi)
	}
}

func (v *checker) rate(key string, bps int64, required bool, ccKey string) {
	switch {
	case bps < 0:
		v.add(key, "%d is negative", bps)
	case bps == 0 && required:
		v.add(key, "must be set (bit/s) when %s is %q", ccKey, "fixed")
	}
}

func (v *checker) file(key, path string) {
	if path == "" {
		v.add(key, "is required")
		return
	}
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		v.add(key, "file %q does not exist", path)
		return
	case errors.Is(err, fs.ErrPermission):
		v.add(key, "file %q is not readable (permission denied)", path)
		return
	case err != nil:
		v.add(key, "file %q cannot be opened: %v", path, err)
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		v.add(key, "%q is a directory, not a file", path)
	}
}

// Socket protocols, for conflict checks between local listen addresses.
const (
	protoUDP = 1 << iota
	protoTCP
)

type socket struct {
	key   string
	proto int
	ap    netip.AddrPort
}

// listen checks an address this gateway binds: an IP literal (binding a name
// would depend on DNS at start) and a port 1..65535, not already taken by
// another key for the same protocol. optional allows "" (off).
func (v *checker) listen(key, s string, proto int, optional bool) (netip.AddrPort, bool) {
	if s == "" && optional {
		return netip.AddrPort{}, false
	}
	ap, ok := v.addr(key, s, false)
	if !ok {
		return ap, false
	}
	for _, o := range v.sockets {
		if o.proto&proto != 0 && o.ap.Port() == ap.Port() && overlaps(o.ap.Addr(), ap.Addr()) {
			v.add(key, "%q is already used by %s", s, o.key)
			return ap, false
		}
	}
	v.sockets = append(v.sockets, socket{key, proto, ap})
	return ap, true
}

// overlaps reports whether sockets bound to a and b on one port collide:
// the same address, or a wildcard covering the other (0.0.0.0 covers IPv4,
// :: covers both families on Linux's default dual-stack sockets).
func overlaps(a, b netip.Addr) bool {
	covers := func(w, x netip.Addr) bool { return w.IsUnspecified() && (w.Is6() || x.Is4()) }
	return a == b || covers(a, b) || covers(b, a)
}

// advertise checks the address gossip announces for the listener at
// listenKey (bound to ap, when it parsed): optional, an IP literal (gossip
// metadata carries an address, and a check must give the same answer
// offline), never the unspecified address; and required when the listener
// is a wildcard, since 0.0.0.0 or :: announced to another machine is that
// machine itself.
// unreachable ends the message of the missing case.
func (v *checker) advertise(key, adv, listenKey, listen string, ap netip.AddrPort, unreachable string) {
	switch {
	case adv != "":
		if a, ok := v.addr(key, adv, false); ok && a.Addr().IsUnspecified() {
			v.add(key, "%q is the unspecified address; nothing can be reached there", adv)
		}
	case ap.IsValid() && ap.Addr().IsUnspecified():
		v.add(key, "is required when %s (%q) listens on every interface: gossip would announce %s, %s", listenKey, listen, ap.Addr(), unreachable)
	}
}

// remote checks the address of another machine: an IP literal or a DNS name,
// and a port 1..65535.
func (v *checker) remote(key, s string) {
	if ap, ok := v.addr(key, s, true); ok && ap.Addr().IsUnspecified() {
		v.add(key, "%q is the unspecified address; nothing can be reached there", s)
	}
}

// addr parses host:port. The returned AddrPort is valid only when the host
// is an IP literal; names are accepted only when allowName is set.
func (v *checker) addr(key, s string, allowName bool) (netip.AddrPort, bool) {
	if s == "" {
		v.add(key, "is required (host:port)")
		return netip.AddrPort{}, false
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		reason := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			reason = ae.Err
		}
		v.add(key, "%q is not host:port (%s)", s, reason)
		return netip.AddrPort{}, false
	}
	ip, ipErr := netip.ParseAddr(host)
	switch {
	case host == "":
		v.add(key, "%q has no host (write 0.0.0.0%s to mean every interface)", s, s)
		return netip.AddrPort{}, false
	case ipErr == nil:
	case !allowName || !looksLikeName(host):
		v.add(key, "%q is not an IP address", s)
		return netip.AddrPort{}, false
	}
	p, err := strconv.Atoi(port)
	switch {
	case err != nil:
		v.add(key, "%q: port %q is not a number", s, port)
		return netip.AddrPort{}, false
	case p < 1 || p > 65535:
		v.add(key, "%q: port %d is out of range 1..65535", s, p)
		return netip.AddrPort{}, false
	}
	if ipErr != nil {
		return netip.AddrPort{}, true // a valid DNS name
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(p)), true
}

var labelRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// looksLikeName reports whether host is a syntactically valid DNS name. A
// name whose last label is all digits ("10.0.0.300") is a mistyped IP
// address, not a name.
func looksLikeName(host string) bool {
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return false
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if !labelRE.MatchString(l) {
			return false
		}
	}
	_, err := strconv.Atoi(labels[len(labels)-1])
	return err != nil
}

// CheckDenyEntry checks one control.deny entry: a gateway name, REGION/NAME,
// REGION/* (every gateway of the region) or serial:HEX (a certificate's
// serial number in hexadecimal, as openssl x509 -serial prints it; colons
// allowed).
func CheckDenyEntry(e string) error {
	if hexs, ok := strings.CutPrefix(e, "serial:"); ok {
		h := strings.ReplaceAll(hexs, ":", "")
		if h == "" || len(h) > 64 {
			return fmt.Errorf("%q: serial:HEX needs 1 to 64 hexadecimal digits", e)
		}
		for _, r := range h {
			if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
				return fmt.Errorf("%q: serial:HEX needs hexadecimal digits, not %q", e, r)
			}
		}
		return nil
	}
	reg, name, scoped := strings.Cut(e, "/")
	if !scoped {
		name, reg = e, ""
	}
	switch {
	case scoped && !nameRE.MatchString(reg):
		return fmt.Errorf("%q: %q is not a valid region name (want NAME, REGION/NAME, REGION/* or serial:HEX)", e, reg)
	case scoped && name == "*":
		return nil
	case !nameRE.MatchString(name):
		return fmt.Errorf("%q: %q is not a valid gateway name (want NAME, REGION/NAME, REGION/* or serial:HEX)", e, name)
	}
	return nil
}
