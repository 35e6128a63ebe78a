package pg

// Internals the external tests reach.
var NewMigrator = newMigrator

const ListenerName = listenerName

// Queued returns how many writes wait for the writer's next flush.
func (s *Store) Queued() int {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return len(s.w.queue)
}

// InFlight returns how many flushes may run at once.
func (s *Store) InFlight() int { return s.w.inFlight }

// Self is the name this Store's writer gives its wake-ups.
func (s *Store) Self() string { return s.self }

// Peers reports whether the Store's writer thinks another replica listens.
func (s *Store) Peers() bool { return s.peers.anyone() }
