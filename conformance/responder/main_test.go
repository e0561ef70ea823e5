package responder

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (the
// responder's loop, the suite's socket readers).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
