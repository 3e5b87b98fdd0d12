package fuse

// ordered is an element of a minHeap: before reports whether it goes first.
type ordered[T any] interface {
	before(T) bool
}

// minHeap is a binary min-heap of timers or buffered events. The element
// order must be total (ties broken by an id), so that what fires first —
// and with it the output — is deterministic.
type minHeap[T ordered[T]] []T

func (h *minHeap[T]) push(x T) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].before(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *minHeap[T]) pop() T {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	var zero T
	s[n] = zero
	s = s[:n]
	*h = s
	s.down(0)
	return top
}

// init orders a heap built by appending.
func (h minHeap[T]) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h minHeap[T]) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].before(h[l]) {
			m = r
		}
		if !h[m].before(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
