package config

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// HostKey is one lan.host_keys entry: a host credential. A host's REGISTER
// names the ID and carries an HMAC-SHA256 under Secret (flowctl.RegisterMAC).
type HostKey struct {
	ID     string
	Secret []byte
}

// Host key bounds.
const (
	minHostSecret = 16
	maxHostSecret = 64
	maxHostKeyID  = 64
)

// ParseHostKey parses one "ID:BASE64" entry (lan.host_keys, a host's key
// file). Errors never quote the secret.
func ParseHostKey(s string) (HostKey, error) {
	id, b64, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return HostKey{}, fmt.Errorf("is not ID:BASE64")
	}
	if id == "" || len(id) > maxHostKeyID || strings.ContainsAny(id, " \t") {
		return HostKey{}, fmt.Errorf("has an ID that is empty, longer than %d bytes or contains blanks", maxHostKeyID)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return HostKey{}, fmt.Errorf("key %q: the secret is not valid base64", id)
	}
	if len(raw) < minHostSecret || len(raw) > maxHostSecret {
		return HostKey{}, fmt.Errorf("key %q: the secret decodes to %d bytes; it must be %d to %d", id, len(raw), minHostSecret, maxHostSecret)
	}
	return HostKey{ID: id, Secret: raw}, nil
}

// ParseHostKeys parses lan.host_keys (validated: use after Validate).
func ParseHostKeys(entries []string) map[string][]byte {
	out := map[string][]byte{}
	for _, e := range entries {
		if k, err := ParseHostKey(e); err == nil {
			out[k.ID] = k.Secret
		}
	}
	return out
}

func (v *checker) hostKeys(key string, entries []string) {
	seen := map[string]int{}
	for i, e := range entries {
		k := fmt.Sprintf("%s[%d]", key, i)
		hk, err := ParseHostKey(e)
		if err != nil {
			v.add(k, "%v", err)
			continue
		}
		if j, dup := seen[hk.ID]; dup {
			v.add(k, "repeats the ID %q of %s[%d]", hk.ID, key, j)
			continue
		}
		seen[hk.ID] = i
	}
}
