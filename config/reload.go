package config

import (
	"errors"
	"reflect"
)

// Reloadable compares the configuration the daemon runs with and a newly
// loaded (and so validated) one. changed lists every key whose value differs,
// in the order of the Config struct; a list of tables (scheduler.classes,
// regions) counts as one key. err is nil when every changed key may change
// live, otherwise it joins one [*FieldError] per key that needs a restart,
// and the daemon must keep running with the old configuration.
//
// Live keys are marked reload:"live" in the Config struct; docs/CONFIG.md
// says why each key is or is not live. In short: what is read afresh at each
// decision (log level, limits, scheduler weights, pacing ceilings, the key
// rotation interval, the gossip keyring, which memberlist can change in
// place) is live; what is bound into sockets, connections, certificates or
// memberlist's timers at start is not.
func Reloadable(running, next *Config) (changed []string, err error) {
	if running == nil || next == nil {
		return nil, errors.New("config: Reloadable needs two configurations")
	}
	a, b := reflect.ValueOf(running).Elem(), reflect.ValueOf(next).Elem()
	var refused []error
	for _, l := range leaves() {
		if l.inList {
			continue // compared as part of their list
		}
		if equal(a.FieldByIndex(l.index), b.FieldByIndex(l.index)) {
			continue
		}
		changed = append(changed, l.Name)
		if !l.Reloadable {
			refused = append(refused, fieldErr(l.Name, "cannot change while the daemon runs; restart it (one gateway of a pair at a time)"))
		}
	}
	return changed, errors.Join(refused...)
}

// equal is reflect.DeepEqual, except that an empty list equals an absent one.
func equal(x, y reflect.Value) bool {
	if x.Kind() == reflect.Slice && x.Len() == 0 && y.Len() == 0 {
		return true
	}
	return reflect.DeepEqual(x.Interface(), y.Interface())
}
