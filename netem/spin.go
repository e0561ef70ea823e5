package netem

import "runtime"

// spinYield is one step of a short busy-wait. Yielding keeps the other
// goroutines (the emulator's readers, the test's own senders) running on a
// machine with two cores.
func spinYield() { runtime.Gosched() }
