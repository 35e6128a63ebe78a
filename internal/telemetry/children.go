package telemetry

import "sync"

// Children caches the children of a Prometheus metric vector by their
// label values K, so that a hot path (every request, every run's start
// and end, every model step) resolves a child once rather than having
// the vector validate and hash its label values on every call. with
// returns the vector's child for k (WithLabelValues). Like the vector, it
// keeps every child it resolved.
type Children[K comparable, M any] struct {
	with func(k K) M

	mu sync.RWMutex
	m  map[K]M
}

// NewChildren returns an empty cache over with.
func NewChildren[K comparable, M any](with func(k K) M) *Children[K, M] {
	return &Children[K, M]{with: with, m: map[K]M{}}
}

// Of returns the child for k.
func (c *Children[K, M]) Of(k K) M {
	c.mu.RLock()
	m, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok = c.m[k]; !ok {
		m = c.with(k)
		c.m[k] = m
	}
	return m
}
