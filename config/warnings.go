package config

import "strconv"

// Warnings returns settings of a valid configuration that are allowed but
// probably not what the operator meant, each naming its key. `mrgw config
// check` prints them and still passes the file; the daemon starts with them.
func (c *Config) Warnings() []*FieldError {
	var out []*FieldError
	if fe := c.flowsWarning(); fe != nil {
		out = append(out, fe)
	}
	return out
}

// FullCreditFlows is how many flows the gateway can hold open at once, each
// with its full limits.flow_credit_bytes: admission reserves a flow's credit
// from limits.memory_bytes and refuses a flow when what is left is less than
// a few datagrams (package gateway, relay.open), so memory_bytes /
// flow_credit_bytes flows are admitted whatever limits.max_flows says. (One
// more may get the remainder as a smaller credit; a flow whose next hop
// grants less gives the difference back.) It is 0 for limits that do not
// validate.
func (l Limits) FullCreditFlows() int64 {
	if l.FlowCreditBytes <= 0 || l.MemoryBytes <= 0 {
		return 0
	}
	return l.MemoryBytes / l.FlowCreditBytes
}

// flowsWarning warns when limits.max_flows cannot be reached because the
// credits of that many flows do not fit in limits.memory_bytes.
func (c *Config) flowsWarning() *FieldError {
	l := c.Limits
	n := l.FullCreditFlows()
	if n == 0 || int64(l.MaxFlows) <= n {
		return nil
	}
	fixes := "lower limits.max_flows to " + strconv.FormatInt(n, 10)
	if credit := l.MemoryBytes / int64(l.MaxFlows); credit >= int64(c.WAN.MTU) {
		fixes += ", lower limits.flow_credit_bytes to " + strconv.FormatInt(credit, 10)
	}
	if mem := int64(l.MaxFlows) * l.FlowCreditBytes; mem <= maxMemoryBytes {
		fixes += " or raise limits.memory_bytes to " + strconv.FormatInt(mem, 10)
	}
	return fieldErr("limits.max_flows",
		"%d flows cannot all be admitted: each reserves limits.flow_credit_bytes (%d) of limits.memory_bytes (%d), "+
			"which holds %d at full credit, and further flows are refused with no capacity; %s",
		l.MaxFlows, l.FlowCreditBytes, l.MemoryBytes, n, fixes)
}
