package sim

// ring is a growable FIFO on a power-of-two circular buffer. Link queues, wires and host
// inboxes use it so that steady state pushes and pops without allocating. It only grows:
// its size is bounded by the number of datagrams alive, itself bounded by Config.MaxDatagrams.
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

// pop removes the oldest element. The ring must not be empty.
func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero // release pointers for the GC
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return v
}

// peek returns the oldest element without removing it. The ring must not be empty.
func (r *ring[T]) peek() *T { return &r.buf[r.head] }

func (r *ring[T]) grow() {
	size := 2 * len(r.buf)
	if size == 0 {
		size = 16
	}
	buf := make([]T, size)
	for i := 0; i < r.n; i++ {
		buf[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
	}
	r.buf, r.head = buf, 0
}
