package region

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"
)

// InstallKey adds a key that decrypts, without using it to encrypt yet.
func (c *Cluster) InstallKey(key []byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	defer c.syncKeys()
	return wrapKeyErr("install", c.keyring.AddKey(key))
}

// UseKey makes an installed key the one that encrypts.
func (c *Cluster) UseKey(key []byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	defer c.syncKeys()
	return wrapKeyErr("use", c.keyring.UseKey(key))
}

// RemoveKey removes a key that is not the primary one.
func (c *Cluster) RemoveKey(key []byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	defer c.syncKeys()
	return wrapKeyErr("remove", c.keyring.RemoveKey(key))
}

// Keys returns the keyring, primary first.
func (c *Cluster) Keys() [][]byte {
	if c.keyring == nil {
		return nil
	}
	return c.keyring.GetKeys()
}

// SetKeyring makes the keyring exactly keys, keys[0] encrypting: it
// installs what is new, switches the primary, then removes what is gone.
// This is what a configuration reload calls. Keys are local to each
// gateway, so a rotation is three reloads of every gateway, each finished
// everywhere before the next starts: add the new key second; move it
// first; drop the old key. Skipping a step cuts gateways off each other.
func (c *Cluster) SetKeyring(keys [][]byte) error {
	if c.keyring == nil {
		return ErrEncryptionDisabled
	}
	if len(keys) == 0 {
		return errors.New("region: an empty keyring would turn encryption off; that needs a restart")
	}
	for i, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return fmt.Errorf("region: keys[%d]: %w", i, err)
		}
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	// The guard must know every key memberlist decrypts with, at once:
	// each step is followed by a sync.
	defer c.syncKeys()
	for _, k := range keys {
		if err := c.keyring.AddKey(k); err != nil {
			return wrapKeyErr("install", err)
		}
	}
	c.syncKeys()
	if err := c.keyring.UseKey(keys[0]); err != nil {
		return wrapKeyErr("use", err)
	}
	for _, old := range c.keyring.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := c.keyring.RemoveKey(old); err != nil {
				return wrapKeyErr("remove", err)
			}
		}
	}
	return nil
}

// syncKeys hands the keyring to the guarded transport, which
// authenticates datagrams and streams with it before memberlist does.
func (c *Cluster) syncKeys() {
	// Keys were validated on their way into the keyring.
	_ = c.guard.setKeys(c.keyring.GetKeys())
}

func wrapKeyErr(op string, err error) error {
	if err != nil {
		return fmt.Errorf("region: %s key: %w", op, err)
	}
	return nil
}
