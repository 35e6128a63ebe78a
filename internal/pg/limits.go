package pg

import (
	"sync"

	"github.com/subagentd/subagentd/internal/store"
)

// limitsTopic announces that a session's limits changed (SetSessionLimits),
// on every replica.
const limitsTopic = "limits"

// maxCachedLimits bounds the limits cache; past it the cache starts over.
const maxCachedLimits = 8192

// limitsCache keeps what SessionLimits read, so the per-step and per-start
// checks of a tree's limits cost no round trip. Everything it holds is
// forgotten when a change of any session's limits is announced — by this
// Store at once, by another replica's NOTIFY on limitsTopic — and at every
// wake-up of all topics (the listener's reconnect, and the poll every
// pollInterval, the safety net for a lost NOTIFY): a change made on
// another replica is seen at once, or a poll later.
type limitsCache struct {
	mu   sync.Mutex
	wake <-chan struct{}            // the Store's subscription to limitsTopic
	gen  uint64                     // bumped at each forgetting
	m    map[[2]string]store.Limits // by (tenant, session)
}

// get returns the cached limits of session id in tenant, and the
// generation a read that misses must hand back to put.
func (c *limitsCache) get(tenant, id string) (store.Limits, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heedLocked()
	l, ok := c.m[[2]string{tenant, id}]
	return l.Clone(), c.gen, ok
}

// generation is what a write of limits hands to put once it committed:
// the generation before it, so that a change announced meanwhile keeps
// them out.
func (c *limitsCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heedLocked()
	return c.gen
}

// heedLocked forgets everything if a change was announced.
func (c *limitsCache) heedLocked() {
	select {
	case <-c.wake:
		c.forgetLocked()
	default:
	}
}

// put keeps l, read at generation gen; a read that overlapped a change is
// not kept.
func (c *limitsCache) put(tenant, id string, gen uint64, l store.Limits) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.m == nil || len(c.m) >= maxCachedLimits {
		c.m = make(map[[2]string]store.Limits)
	}
	c.m[[2]string{tenant, id}] = l.Clone()
}

// forget drops everything: this Store changed a session's limits.
func (c *limitsCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked()
}

func (c *limitsCache) forgetLocked() {
	c.m = nil
	c.gen++
}
