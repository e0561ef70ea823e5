//go:build linux

package gateway

import "errors"

// Errors of the gateway's lifecycle. Configuration problems are returned as
// the config package's *config.Error (each problem a *config.FieldError
// naming its key) wrapped in ErrInvalidConfig.
var (
	// ErrInvalidConfig wraps every configuration problem New finds.
	ErrInvalidConfig = errors.New("gateway: invalid configuration")
	// ErrCredentials: the control.tls files could not be loaded.
	ErrCredentials = errors.New("gateway: cannot load control TLS credentials")
	// ErrBind: a listening socket could not be opened.
	ErrBind = errors.New("gateway: cannot bind")
	// ErrClosed: the gateway has stopped.
	ErrClosed = errors.New("gateway: closed")
	// ErrStarted: Run was called twice.
	ErrStarted = errors.New("gateway: already running")
	// ErrNameInUse: another gateway already holds this gateway's name in
	// gossip; Run stops without having served and returns it, naming the
	// holder's address.
	ErrNameInUse = errors.New("gateway: name in use")
	// ErrReload: a reload was refused; the running configuration stays.
	ErrReload = errors.New("gateway: reload refused")
	// errFlowEnded fails the relayed messages of a flow that was torn down.
	errFlowEnded = errors.New("gateway: flow ended")
)
