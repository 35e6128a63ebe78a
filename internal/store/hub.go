package store

import "sync"

// Hub fans wake-ups out to in-process subscribers by topic. Each subscriber
// owns a channel with a buffer of one: a wake-up is coalesced with a pending
// one and never blocks the waker. internal/memstore wakes it on commit, internal/pg from NOTIFY.
// The zero value is ready to use.
type Hub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// Subscribe returns a channel that receives a value after each Wake of topic
// (or WakeAll), and a func that ends the subscription. The channel is never
// closed; ending twice is harmless.
func (h *Hub) Subscribe(topic string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[string]map[chan struct{}]struct{})
	}
	if h.subs[topic] == nil {
		h.subs[topic] = make(map[chan struct{}]struct{})
	}
	h.subs[topic][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[topic], ch)
		if len(h.subs[topic]) == 0 {
			delete(h.subs, topic)
		}
	}
}

// Wake wakes every subscriber of topic.
func (h *Hub) Wake(topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[topic] {
		notify(ch)
	}
}

// WakeAll wakes every subscriber of every topic, for when wake-ups may have
// been lost and every reader must re-query.
func (h *Hub) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, chans := range h.subs {
		for ch := range chans {
			notify(ch)
		}
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default: // a wake-up is already pending
	}
}
