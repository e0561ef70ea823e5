package cc

// What the external tests of this package (package cc_test, which link
// cc/longrtt and so cannot be in package cc) read of its internals.

const (
	FallbackBeta   = fallbackBeta
	FallbackC      = fallbackC
	FallbackMemory = fallbackMemory
)

// FallbackActive reports whether the classic fallback holds the rate.
func (a *AIMD) FallbackActive() bool { return a.fallbackActive() }
