package config

import (
	"os"
	"strings"
	"testing"
)

// docs/CONFIG.md documents every key with its type, default, reloadability
// and environment variable; the table is generated from the struct tags so
// it cannot drift.
func TestDocsKeyTable(t *testing.T) {
	const path = "../docs/CONFIG.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := WithKeyTable(string(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if string(data) != want {
		t.Fatalf("the key table in %s is out of date: run go run ./cmd/mrgw config keys --doc docs/CONFIG.md", path)
	}
}

func TestKeys(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Keys() {
		if seen[k.Name] {
			t.Errorf("key %s listed twice", k.Name)
		}
		seen[k.Name] = true
		if k.Doc == "" {
			t.Errorf("key %s has no doc tag", k.Name)
		}
		inList := strings.Contains(k.Name, "[]") || k.Type == "list of tables"
		if inList != (k.Env == "") {
			t.Errorf("key %s: env %q", k.Name, k.Env)
		}
	}
	for _, want := range []string{"wan.mtu", "wan.planes[].local", "regions[].gateways[].wan", "control.tls.ca_file", "gossip.keyring"} {
		if !seen[want] {
			t.Errorf("Keys() lacks %s", want)
		}
	}
	if k := keyByName("wan.paths_per_peer"); k.Env != "MRGW_WAN_PATHS_PER_PEER" || k.Default != "16" || k.Reloadable {
		t.Errorf("wan.paths_per_peer = %+v", k)
	}
	if k := keyByName("scheduler.classes"); !k.Reloadable || k.Default != `[{name: "default", weight: 1}]` {
		t.Errorf("scheduler.classes = %+v", k)
	}
}

func keyByName(name string) Key {
	for _, k := range Keys() {
		if k.Name == name {
			return k
		}
	}
	return Key{}
}
