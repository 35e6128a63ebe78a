package subagent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/subagentd/subagentd/internal/store"
)

// providerLog is the provider set the durable lifecycle log ends with, so
// that a restart with the same providers appends no provider-added and one
// without a provider appends its provider-removed.
type providerLog struct {
	mu  sync.Mutex       // serialises reads and updates with the appends
	ids map[string]int64 // name → id of its provider-added; nil until read
}

// RetireUnregistered records subagent/provider-removed for every provider
// the durable log shows as added that this service has not registered: call
// it once the start-up registrations are done, so the log follows a
// provider dropped from the configuration. Every replica of a deployment
// is expected to register the same providers.
func (s *Service) RetireUnregistered(ctx context.Context) error {
	s.logged.mu.Lock()
	defer s.logged.mu.Unlock()
	if err := s.loadLogged(ctx); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(s.logged.ids)) {
		if _, ok := s.Provider(name); ok {
			continue
		}
		if _, err := s.record(ctx, Event{Type: EventProviderRemoved, Provider: name}); err != nil {
			return err
		}
		delete(s.logged.ids, name)
	}
	return nil
}

// recordAdded appends e, a provider-added, unless the durable log already
// shows its provider as added; it returns the id of the event that does.
func (s *Service) recordAdded(ctx context.Context, e Event) (int64, error) {
	s.logged.mu.Lock()
	defer s.logged.mu.Unlock()
	if err := s.loadLogged(ctx); err != nil {
		return 0, err
	}
	if id, ok := s.logged.ids[e.Provider]; ok {
		return id, nil
	}
	stored, err := s.record(ctx, e)
	if err != nil {
		return 0, err
	}
	s.logged.ids[e.Provider] = stored.ID
	return stored.ID, nil
}

// recordRemoved appends provider-removed for name and returns its id.
func (s *Service) recordRemoved(ctx context.Context, name string) (int64, error) {
	s.logged.mu.Lock()
	defer s.logged.mu.Unlock()
	stored, err := s.record(ctx, Event{Type: EventProviderRemoved, Provider: name})
	if err != nil {
		return 0, err
	}
	delete(s.logged.ids, name) // a no-op on the nil map of an unread log
	return stored.ID, nil
}

// loadLogged reads s.logged from the provider events of the durable log,
// once. Callers hold s.logged.mu.
func (s *Service) loadLogged(ctx context.Context) error {
	if s.logged.ids != nil {
		return nil
	}
	logged := map[string]int64{}
	for after := int64(0); ; {
		rows, err := s.store.Lifecycle(ctx, store.LifecycleFilter{After: after, Limit: providerPage, Types: []string{EventProviderAdded, EventProviderRemoved}})
		if err != nil {
			return fmt.Errorf("read provider events: %w", err)
		}
		for _, row := range rows {
			e, err := ParseEvent(row)
			if err != nil {
				return err
			}
			if e.Type == EventProviderAdded {
				logged[e.Provider] = e.Seq
			} else {
				delete(logged, e.Provider)
			}
			after = row.ID
		}
		if len(rows) < providerPage {
			break
		}
	}
	s.logged.ids = logged
	return nil
}

// providerPage is the page size loadLogged reads the log in; at most what
// a store returns at once.
const providerPage = 500
