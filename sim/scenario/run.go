package scenario

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/mrgw/mrgw/cc"
	"github.com/mrgw/mrgw/metaroce"
	"github.com/mrgw/mrgw/pathmgr"
	"github.com/mrgw/mrgw/sim"

	"github.com/mrgw/mrgw/units"
)

// Setup describes one simulated run: Flows senders at site A writing to one
// receiver at site B across Planes planes.
type Setup struct {
	// MeasureState reports the heap held by protocol state in
	// Result.StateBytes (two extra garbage collections).
	MeasureState bool
	Mode         metaroce.Mode
	Planes       int
	RateBps      float64       // per plane, each direction
	RTT          time.Duration // base round trip (propagation only)
	Loss         float64       // random loss on every plane link, after the queue
	Flows        int
	Paths        int // per connection
	MTU          int
	MsgSize      int
	Duration     time.Duration
	Warmup       time.Duration
	// CC builds the controllers; nil means a fixed window of WindowBDPs
	// bandwidth-delay products split over the paths, paced at the receiver's hint.
	CC         cc.Factory
	WindowBDPs float64
	// QueueBytes is each plane link's drop-tail limit (0: 2 BDP, at least 1 MiB).
	QueueBytes   int
	ECNThreshold int
	// ReceiverCapacityBps is what the receiver divides into rate hints
	// (0: the fabric's capacity, Planes × RateBps).
	ReceiverCapacityBps float64
	Seed                uint64
	// Faults, if set, is called with the network before the run to schedule faults.
	Faults func(n *sim.Network)

	// Per-flow settings (congestion-control scenarios); a missing entry
	// takes the setup-wide value. FlowRTTs[i] is flow i's base round trip:
	// the part above RTT is added as delay on the sender host's uplink, so
	// flows of different round trips share the plane links. FlowStart[i]
	// is when flow i connects.
	FlowRTTs  []time.Duration
	FlowStart []time.Duration
	FlowCC    []cc.Factory
	FlowPaths []int
	// NoHints turns the receiver loop off (no rate hints), so the
	// bottleneck is the fabric's and only the sender loop acts.
	NoHints bool
	// FlowNoHint[i] leaves flow i out of the receiver loop
	// (metaroce.ConnOptions.NoRateHint): it gets no hint and takes no
	// share, as a flow that is no mrgw connection would (the classic flow
	// of the coexistence scenario).
	FlowNoHint []bool
	// Sample, if positive, records time series every Sample of virtual time.
	Sample time.Duration
	// HostStalls, if its Every is set, stalls every host's driver (sim.Host.Stall)
	// as a user-space driver on a busy machine is: see HostStalls.
	HostStalls HostStalls
	// StallFlows, if set, limits HostStalls to the sending hosts of the
	// flows it marks: the receiver and the other senders run unstalled,
	// as a kernel TCP flow beside a user-space mrgw does.
	StallFlows []bool
	// PacingCatchUp is metaroce.Config.PacingCatchUp for every endpoint.
	PacingCatchUp float64
	// Streams, if above 1, makes each connection carry that many flows
	// of equal demand, one per stream, as a gateway's WAN connection does:
	// each keeps StreamWindow messages incomplete (default 8), and
	// Result.StreamBytes counts what each completed after the warm-up.
	Streams, StreamWindow int
	// FlowStreams[i], if set, is the number of streams of connection i
	// instead of Streams (connections that carry different numbers of
	// flows, as gateway pairs may).
	FlowStreams []int
	// ConnWeights[i], if set and positive, is connection i's weight at a
	// shared bottleneck (cc.AIMD.SetWeight: the flows it carries), set
	// when it connects.
	ConnWeights []float64
	// StreamWeights[i], if set, is stream i's weight on every connection
	// (metaroce.Conn.SetStreamWeight), as the gateway weighs flows by
	// class.
	StreamWeights []int
}

// flowStreams is the number of streams connection f carries (0 or 1: one
// bulk over the whole connection).
func (s *Setup) flowStreams(f int) int {
	if f < len(s.FlowStreams) && s.FlowStreams[f] > 0 {
		return s.FlowStreams[f]
	}
	return s.Streams
}

// HostStalls describe the descheduling of a user-space driver: every host
// stalls at intervals drawn uniformly from [Every/2, 3·Every/2], each time
// for a duration drawn uniformly from [0, Max], from a seeded stream (the
// run stays deterministic). The real-socket load tests on a shared 2-core
// machine showed the sender's owner goroutine stalling 3-12 ms several
// times per 100 ms (docs/CC.md §7).
type HostStalls struct {
	Every, Max time.Duration
}

// schedule stalls h from the setup's seeded stream until the run ends.
func (hs HostStalls) schedule(sm *sim.Sim, h *sim.Host, seed uint64, end time.Duration) {
	if hs.Every <= 0 || hs.Max <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(seed, uint64(h.ID())))
	var next func()
	next = func() {
		h.Stall(time.Duration(rng.Int64N(int64(hs.Max) + 1)))
		if t := sm.Now() + hs.Every/2 + time.Duration(rng.Int64N(int64(hs.Every)+1)); t < end {
			sm.At(t, next)
		}
	}
	sm.At(hs.Every/2+time.Duration(rng.Int64N(int64(hs.Every)+1)), next)
}

func (s *Setup) flowRTT(f int) time.Duration {
	if f < len(s.FlowRTTs) && s.FlowRTTs[f] > s.RTT {
		return s.FlowRTTs[f]
	}
	return s.RTT
}

func (s *Setup) flowPaths(f int) int {
	if f < len(s.FlowPaths) && s.FlowPaths[f] > 0 {
		return s.FlowPaths[f]
	}
	return s.Paths
}

func (s *Setup) maxRTT() time.Duration {
	m := s.RTT
	for f := 0; f < s.Flows; f++ {
		m = max(m, s.flowRTT(f))
	}
	return m
}

// Result is what one run measured.
type Result struct {
	CapacityBps   float64
	GoodputBps    float64
	PerFlowBps    []float64
	MaxQueueBytes int
	Retransmits   uint64
	Lost          uint64
	SimPackets    uint64
	Wall          time.Duration
	CCName        string
	Senders       []*metaroce.Conn
	// QueueDrops counts datagrams the plane queues refused (A→B);
	// PlaneBytes is each plane's A→B bytes delivered.
	QueueDrops uint64
	PlaneBytes []uint64
	// StreamBytes[f][i] is the payload of the messages stream i of flow f
	// completed between the warm-up and the end (Setup.Streams).
	StreamBytes [][]uint64
	// Over the whole run, summed over the senders: DATA packets sent and
	// retransmissions by cause (metaroce.ConnStats); WireLost counts
	// datagrams the plane links lost at random (A→B).
	DataSent, RetxGap, RetxTimeout, RetxSpurious, WireLost uint64
	// ConnectedAt is when each sender's connection was established (-1: never).
	ConnectedAt []time.Duration
	// Time series, if Setup.Sample was set: at each Times[k], Goodput[f][k]
	// is flow f's goodput over the interval ending then and Rate[f][k] its
	// controller's pacing rate (bits/s), Queue[k] the fullest plane queue
	// in bytes.
	Times   []time.Duration
	Goodput [][]float64
	Rate    [][]float64
	Queue   []float64
	// PlaneQueue[i][k] is plane i's queue (A→B) in bytes at Times[k].
	PlaneQueue [][]float64
	// StateBytes, if Setup.MeasureState was set, is the heap the protocol
	// state of every endpoint and connection held at the end of the run
	// (after a GC, simulator buffers excluded).
	StateBytes uint64
}

// capacity returns the fabric's capacity in bits/s.
func (s *Setup) capacity() float64 { return float64(s.Planes) * s.RateBps }

func (s *Setup) withDefaults() Setup {
	c := *s
	if c.Planes == 0 {
		c.Planes = 1
	}
	if c.Flows == 0 {
		c.Flows = 1
	}
	if c.MTU == 0 {
		c.MTU = 4096
	}
	if c.Paths == 0 {
		c.Paths = 8
	}
	if c.Mode == metaroce.ModeRoCEv2 {
		c.Paths = 1
	}
	if c.WindowBDPs == 0 {
		c.WindowBDPs = 2
	}
	if c.ReceiverCapacityBps == 0 {
		c.ReceiverCapacityBps = c.capacity()
	}
	bdp := units.BitRate(c.capacity()).Bytes().BytesIn(c.RTT)
	if c.QueueBytes == 0 {
		c.QueueBytes = int(2 * units.BitRate(c.RateBps).Bytes().BytesIn(c.RTT))
		if c.QueueBytes < 1<<20 {
			c.QueueBytes = 1 << 20
		}
	}
	if c.MsgSize == 0 {
		c.MsgSize = 1 << 20
		if bdp > 64<<20 {
			c.MsgSize = 16 << 20
		}
	}
	return c
}

// PathConfig returns failure-detection settings for a base RTT.
func PathConfig(rtt time.Duration) pathmgr.Config {
	pc := pathmgr.DefaultConfig()
	pc.InitialRTT = rtt + 10*time.Microsecond
	pc.MaxAckDelay = rtt / 20
	if pc.MaxAckDelay < 5*time.Microsecond {
		pc.MaxAckDelay = 5 * time.Microsecond
	}
	if pc.MaxAckDelay > time.Millisecond {
		pc.MaxAckDelay = time.Millisecond
	}
	pc.MinPTO = rtt/2 + 20*time.Microsecond
	pc.ProbeInterval = rtt + 50*time.Microsecond
	pc.MaxProbeInterval = 8 * pc.ProbeInterval
	return pc
}

// Run executes a setup and measures it.
func Run(in Setup) (Result, error) {
	s := in.withDefaults()
	if s.RateBps <= 0 || s.RTT <= 0 || s.Duration <= s.Warmup {
		return Result{}, fmt.Errorf("scenario: need RateBps > 0, RTT > 0 and Duration > Warmup")
	}
	pktSize := s.MTU + metaroce.DataHeaderLen
	bdp := units.BitRate(s.capacity()).Bytes().BytesIn(s.maxRTT())
	factory := s.CC
	if factory == nil {
		w := int(s.WindowBDPs * bdp / float64(s.Flows*s.Paths))
		if w < 4*pktSize {
			w = 4 * pktSize
		}
		factory = cc.NewFixed(w, 0)
	}
	inflightPkts := int(s.WindowBDPs*bdp)/pktSize + s.QueueBytes*s.Planes/pktSize
	simCfg := sim.Config{
		Seed:            s.Seed,
		MaxDatagramSize: pktSize + 64,
		MaxDatagrams:    2*inflightPkts + 200_000,
	}
	var heapAtSetup uint64
	if s.MeasureState {
		heapAtSetup = heapInUse()
	}
	sm := sim.New(simCfg)
	link := sim.LinkConfig{Rate: int64(s.RateBps), Delay: s.RTT / 2, QueueLimit: s.QueueBytes, ECNThreshold: s.ECNThreshold, Loss: s.Loss}
	net := sim.NewNetwork(sm, sim.NetworkConfig{Planes: s.Planes, AtoB: link, BtoA: link})

	mcfg := metaroce.Config{
		Mode:             s.Mode,
		MTU:              s.MTU,
		Paths:            s.Paths,
		CC:               factory,
		Path:             PathConfig(s.RTT),
		MaxPathInflight:  1 << 20,
		MaxMessagesAhead: 1 << 16,
		PacingCatchUp:    s.PacingCatchUp,
	}
	noHint := map[metaroce.PeerID]bool{} // filled in by addSenders
	recv, region, err := s.newReceiver(sm, net, mcfg, noHint)
	if err != nil {
		return Result{}, err
	}

	src := make([]byte, s.MsgSize)
	rng := rand.New(rand.NewPCG(s.Seed, 1))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	var res Result
	if err := s.addSenders(sm, net, mcfg, recv.Host, src, len(region), bdp, &res, noHint); err != nil {
		return Result{}, err
	}
	if s.Sample > 0 {
		sampler(sm, net, &s, &res, recv)
	}
	if s.Faults != nil {
		s.Faults(net)
	}
	// Goodput is payload placed in the receiver's memory between the end of
	// the warm-up and the end of the run: each byte counts once however many
	// times it was sent.
	placedAt := func() map[uint64]uint64 {
		out := make(map[uint64]uint64)
		for _, c := range recv.EP.Conns() {
			out[c.ID()] = c.Stats.PayloadBytesPlaced
		}
		return out
	}
	var atWarmup, atEnd map[uint64]uint64
	sm.At(s.Warmup, func() { atWarmup = placedAt() })
	sm.At(s.Duration, func() { atEnd = placedAt() })
	start := time.Now()
	sm.Run(s.Duration)
	res.Wall = time.Since(start)
	if s.MeasureState {
		// Everything allocated since setup, less the application's buffers
		// and the simulator's datagram pool.
		held := heapInUse()
		other := uint64(len(region)+len(src)) + sm.Stats().DatagramsAllocated*uint64(simCfg.MaxDatagramSize)
		if held > heapAtSetup+other {
			res.StateBytes = held - heapAtSetup - other
		}
		runtime.KeepAlive(recv)
	}
	if atEnd == nil {
		atEnd = placedAt()
	}

	s.measure(&res, net, atWarmup, atEnd)
	res.SimPackets = sm.Stats().DatagramsSent
	return res, nil
}

// newReceiver makes the receiving endpoint at site B, with its registered
// region, wide enough for every flow's paths.
func (s *Setup) newReceiver(sm *sim.Sim, net *sim.Network, mcfg metaroce.Config, noHint map[metaroce.PeerID]bool) (*Node, []byte, error) {
	rcfg := mcfg
	rcfg.Listen = true
	rcfg.AcceptOptions = func(peer metaroce.PeerID) metaroce.ConnOptions {
		return metaroce.ConnOptions{NoRateHint: noHint[peer]}
	}
	rcfg.ReceiveCapacity = units.BitRate(s.ReceiverCapacityBps)
	if s.NoHints {
		rcfg.ReceiveCapacity = 0
	}
	for f := 0; f < s.Flows; f++ {
		rcfg.Paths = max(rcfg.Paths, s.flowPaths(f))
	}
	rcfg.Seed = s.Seed ^ 0xabcdef
	recv, err := NewNode(rcfg)
	if err != nil {
		return nil, nil, err
	}
	region := make([]byte, 64<<20)
	if s.MsgSize > len(region) {
		region = make([]byte, s.MsgSize)
	}
	if err := recv.EP.Memory().Register(bulkKey, region); err != nil {
		return nil, nil, err
	}
	recvHost := net.AddHost(sim.SiteB, recv, sim.HostConfig{})
	recv.Host = recvHost
	if s.StallFlows == nil {
		s.HostStalls.schedule(sm, recvHost, s.Seed, s.Duration)
	}
	return recv, region, nil
}

// addSenders makes one sending endpoint per flow at site A, each with a
// bulk sender (messages of src, into a region of regionSize bytes),
// connected to the receiver now or at the flow's start time.
func (s *Setup) addSenders(sm *sim.Sim, net *sim.Network, mcfg metaroce.Config, recvHost *sim.Host, src []byte, regionSize int, bdp float64, res *Result, noHint map[metaroce.PeerID]bool) error {
	outstanding := int(6*s.WindowBDPs*bdp/float64(s.Flows)/float64(s.MsgSize)) + 4
	res.Senders = make([]*metaroce.Conn, s.Flows)
	res.ConnectedAt = make([]time.Duration, s.Flows)
	for f := 0; f < s.Flows; f++ {
		cfg := mcfg
		cfg.Seed = s.Seed + uint64(f)*7919
		cfg.Paths = s.flowPaths(f)
		cfg.Path = PathConfig(s.flowRTT(f))
		if f < len(s.FlowCC) && s.FlowCC[f] != nil {
			cfg.CC = s.FlowCC[f]
		}
		node, err := NewNode(cfg)
		if err != nil {
			return err
		}
		res.ConnectedAt[f] = -1
		b := &bulk{msgSize: s.MsgSize, outstanding: outstanding, src: src, key: bulkKey, regionSize: regionSize, stream: uint32(f)}
		var streams []*bulk // Setup.Streams: one bulk per stream, each its own window
		if ns := s.flowStreams(f); ns > 1 || len(s.FlowStreams) > 0 {
			w := s.StreamWindow
			if w <= 0 {
				w = 8
			}
			res.StreamBytes = append(res.StreamBytes, make([]uint64, ns))
			for i := 0; i < ns; i++ {
				streams = append(streams, &bulk{msgSize: s.MsgSize, outstanding: w, perStream: true, src: src, key: bulkKey, regionSize: regionSize, stream: uint32(i)})
			}
		}
		node.OnEvent = func(now time.Duration, ev metaroce.Event) {
			switch ev.Kind {
			case metaroce.EventConnected:
				res.ConnectedAt[f] = now
				if streams == nil {
					b.fill(now)
				}
				for i, w := range s.StreamWeights {
					b.conn.SetStreamWeight(uint32(i), w)
				}
				for _, sb := range streams {
					sb.conn = b.conn
					sb.fill(now)
				}
			case metaroce.EventSendComplete:
				if streams == nil {
					b.fill(now)
					break
				}
				if int(ev.Stream) < len(streams) {
					sb := streams[ev.Stream]
					sb.queued--
					if now >= s.Warmup && now <= s.Duration && ev.Err == nil {
						res.StreamBytes[f][ev.Stream] += ev.Len
					}
					sb.fill(now)
				}
			}
		}
		hc := sim.HostConfig{}
		if extra := s.flowRTT(f) - s.RTT; extra > 0 {
			hc.Uplink = sim.LinkConfig{Delay: extra}
		}
		h := net.AddHost(sim.SiteA, node, hc)
		node.Host = h
		if f < len(s.FlowNoHint) && s.FlowNoHint[f] {
			noHint[metaroce.PeerID(h.ID())] = true
		}
		if s.StallFlows == nil || f < len(s.StallFlows) && s.StallFlows[f] {
			s.HostStalls.schedule(sm, h, s.Seed, s.Duration)
		}
		connect := func(now time.Duration) error {
			conn, err := node.EP.Connect(now, metaroce.PeerID(recvHost.ID()))
			if err != nil {
				return err
			}
			b.conn = conn
			if f < len(s.ConnWeights) && s.ConnWeights[f] > 0 {
				if w, ok := conn.Controller().(interface{ SetWeight(float64) }); ok {
					w.SetWeight(s.ConnWeights[f])
				}
			}
			res.Senders[f] = conn
			res.CCName = conn.Controller().Name()
			h.Kick()
			return nil
		}
		if f < len(s.FlowStart) && s.FlowStart[f] > 0 {
			sm.At(s.FlowStart[f], func() {
				if err := connect(s.FlowStart[f]); err != nil {
					panic(err) // cannot happen: the endpoint is fresh
				}
			})
		} else if err := connect(0); err != nil {
			return err
		}
	}
	return nil
}

// measure fills in the result from the counters at the end of the warm-up
// and of the run.
func (s *Setup) measure(res *Result, net *sim.Network, atWarmup, atEnd map[uint64]uint64) {
	res.CapacityBps = s.capacity()
	secs := (s.Duration - s.Warmup).Seconds()
	for _, c := range res.Senders {
		if c == nil {
			res.PerFlowBps = append(res.PerFlowBps, 0)
			continue
		}
		bps := float64(units.Throughput(float64(atEnd[c.ID()]-atWarmup[c.ID()]), secs))
		res.PerFlowBps = append(res.PerFlowBps, bps)
		res.GoodputBps += bps
		res.Retransmits += c.Stats.Retransmits
		res.Lost += c.Stats.PacketsLost
		res.DataSent += c.Stats.DataSent
		res.RetxGap += c.Stats.RetransmitsGap
		res.RetxTimeout += c.Stats.RetransmitsTimeout
		res.RetxSpurious += c.Stats.RetransmitsSpurious
	}
	for i := 0; i < net.Planes(); i++ {
		st := net.Plane(i).AtoB().Stats()
		if q := st.MaxQueueBytes; q > res.MaxQueueBytes {
			res.MaxQueueBytes = q
		}
		res.QueueDrops += st.DroppedQueue
		res.WireLost += st.DroppedLoss
		res.PlaneBytes = append(res.PlaneBytes, st.BytesDelivered)
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
