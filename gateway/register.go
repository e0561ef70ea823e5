//go:build linux

package gateway

import (
	"fmt"
	"time"

	"github.com/mrgw/mrgw/flowctl"
	"github.com/mrgw/mrgw/metrics"
)

// Host registration (docs/GATEWAY.md, "Registration").
// An endpoint name belongs to one live host. A REGISTER for a name another
// connection holds replaces it only if it comes from the same host process
// (its Instance), if it asks for a takeover (FlagTakeover; the holder is
// told), or if the holder has fallen silent for staleAfter (a host killed
// and restarted); anything else is refused with REGISTER_ERR "endpoint name
// in use". A connection whose registration is gone is told so when it next
// PINGs (REGISTER_ERR "not registered") and registers again.

// staleAfter: a holder that has sent no control message for this long (48
// PINGs at the default period) is taken for dead.
const staleAfter = 3 * time.Second

func (r *relay) register(ci *connInfo, m *flowctl.Msg) {
	now := r.g.ep.Now()
	peer := ci.c.Peer()
	if !r.authenticate(ci, m, now) {
		return
	}
	// A host names its region; a gateway serves one. A host that names
	// another (a wrong --region, or another region's gateways in its
	// list) would register, and flows addressed to it in the region it
	// believes in would never find it.
	if self := r.g.Config().Node.Region; m.Region != self {
		r.refuseRegister(ci, m, flowctl.CodeUnknownRegion, metrics.RegisterWrongRegion,
			fmt.Sprintf("this gateway serves region %q, not %q", self, m.Region))
		return
	}
	old := r.hosts[m.Endpoint]
	switch {
	case old == nil || old.dead || old == ci:
	case m.Instance != 0 && old.instance == m.Instance:
		// The same host process on a new connection.
	case m.Flags&flowctl.FlagTakeover != 0:
		r.sendCtl(old, &flowctl.Msg{Type: flowctl.RegisterErr, Code: flowctl.CodeTakenOver,
			Reason: fmt.Sprintf("%s/%s was taken over by another host (takeover requested)", m.Region, m.Endpoint)})
		old.takenOver = true
		r.g.log.Warn("endpoint taken over", "endpoint", m.Endpoint, "old_peer", old.c.Peer(), "new_peer", peer)
	case now-r.adm.lastHeard(old.c.Peer()) >= staleAfter:
		r.g.log.Info("endpoint re-registered: its holder fell silent", "endpoint", m.Endpoint,
			"silent", (now - r.adm.lastHeard(old.c.Peer())).Round(time.Millisecond), "old_peer", old.c.Peer(), "new_peer", peer)
	default:
		r.refuseRegister(ci, m, flowctl.CodeDuplicate, metrics.RegisterDuplicate,
			fmt.Sprintf("%s/%s is registered by another running host", m.Region, m.Endpoint))
		return
	}
	if ci.endpoint != "" && ci.endpoint != m.Endpoint && r.hosts[ci.endpoint] == ci {
		delete(r.hosts, ci.endpoint)
	}
	ci.endpoint, ci.instance, ci.takenOver = m.Endpoint, m.Instance, false
	r.hosts[m.Endpoint] = ci
	r.adm.registered(peer)
	r.sendCtl(ci, &flowctl.Msg{Type: flowctl.RegisterOK})
	r.g.log.Info("host registered", "endpoint", m.Endpoint, "peer", peer, "authenticated", m.KeyID)
}

// refuseRegister answers a REGISTER with REGISTER_ERR, counts and logs it
// (one warn line per reason per interval).
func (r *relay) refuseRegister(ci *connInfo, m *flowctl.Msg, code flowctl.Code, reason, why string) {
	r.sendCtl(ci, &flowctl.Msg{Type: flowctl.RegisterErr, Code: code, Reason: why})
	r.g.metrics.RegistrationRefused(reason)
	r.adm.log.Warn("register_"+reason, "host registration refused", "endpoint", m.Endpoint, "region", m.Region,
		"peer", ci.c.Peer(), "why", why)
}

// ping answers a host's PING; a connection whose registration is gone is
// told so, and the host registers again.
func (r *relay) ping(ci *connInfo, m *flowctl.Msg) {
	r.sendCtl(ci, &flowctl.Msg{Type: flowctl.Pong, Seq: m.Seq})
	if ci.wan != nil || ci.takenOver || (ci.endpoint != "" && r.hosts[ci.endpoint] == ci) {
		return
	}
	r.sendCtl(ci, &flowctl.Msg{Type: flowctl.RegisterErr, Code: flowctl.CodeNotRegistered, Reason: "this connection has no registration: register again"})
}

// registerWindow bounds how far a REGISTER's time may be from the
// gateway's clock: a captured REGISTER is bound to its connection id (the
// MAC covers it) and stale after this.
const registerWindow = 2 * time.Minute

// authenticate checks a REGISTER's credential against lan.host_keys:
// with keys configured, a REGISTER must name one (KeyID), be
// recent (Time) and carry its MAC over the registration and this
// connection's id. A refusal is answered with REGISTER_ERR not
// authenticated, counted and logged. No keys: hosts are not authenticated
// (the gateway warned at start).
func (r *relay) authenticate(ci *connInfo, m *flowctl.Msg, _ time.Duration) bool {
	if len(r.hostKeys) == 0 {
		return true
	}
	var reason, why string
	key := r.hostKeys[m.KeyID]
	wall := time.Now().Unix()
	switch {
	case m.KeyID == "" || len(m.MAC) == 0:
		reason, why = metrics.RegisterUnauthenticated, "no host credential; this gateway requires one (lan.host_keys)"
	case key == nil:
		reason, why = metrics.RegisterUnknownKey, fmt.Sprintf("host key %q is not in lan.host_keys", m.KeyID)
	case m.Time > uint64(wall)+uint64(registerWindow/time.Second) || m.Time+uint64(registerWindow/time.Second) < uint64(wall):
		reason, why = metrics.RegisterStale, fmt.Sprintf("registration time is %d s off the gateway's clock (check NTP)", int64(m.Time)-wall)
	case !flowctl.CheckRegisterMAC(key, m, ci.c.ID()):
		reason, why = metrics.RegisterBadMAC, fmt.Sprintf("the MAC does not verify under host key %q (wrong secret?)", m.KeyID)
	default:
		return true
	}
	r.refuseRegister(ci, m, flowctl.CodeUnauthenticated, reason, why)
	return false
}
