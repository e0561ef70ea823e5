package metaroce

import "fmt"

// Memory is a registry of memory regions that WRITE packets may place data
// into, addressed by a key. It plays the part of an RDMA protection domain: an
// Endpoint shares one Memory among all its connections. The bytes belong to
// the application; Memory only bounds and names them.
type Memory struct {
	regions map[uint32][]byte
}

// NewMemory returns an empty registry.
func NewMemory() *Memory { return &Memory{regions: make(map[uint32][]byte)} }

// Register makes buf writable by peers under key. Key 0 is reserved.
func (m *Memory) Register(key uint32, buf []byte) error {
	if key == 0 {
		return fmt.Errorf("metaroce: memory key 0 is reserved")
	}
	if _, ok := m.regions[key]; ok {
		return fmt.Errorf("metaroce: memory key %d already registered", key)
	}
	m.regions[key] = buf
	return nil
}

// Deregister removes key; packets naming it afterwards are refused.
func (m *Memory) Deregister(key uint32) { delete(m.regions, key) }

// Region returns the buffer registered under key.
func (m *Memory) Region(key uint32) ([]byte, bool) {
	b, ok := m.regions[key]
	return b, ok
}

// place returns the slice of region key that a payload of n bytes at region
// offset off would cover, or the reason it may not be written.
func (m *Memory) place(key uint32, off uint64, n int) ([]byte, ErrorCode) {
	r, ok := m.regions[key]
	if !ok {
		return nil, ErrCodeUnknownKey
	}
	if off > uint64(len(r)) || uint64(n) > uint64(len(r))-off {
		return nil, ErrCodeOutOfBounds
	}
	return r[off : off+uint64(n)], 0
}
