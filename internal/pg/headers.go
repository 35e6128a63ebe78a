package pg

import (
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// headerCacheSize bounds one generation of the header cache: at most twice
// this many headers are held, a few hundred bytes each.
const headerCacheSize = 4096

// headers caches session headers. A header never changes once stored and
// Postgres never deletes a session, so a header any replica stored is
// forever the truth: a start of a run under a known parent, or a read of a
// known session, costs no round trip. Only stored headers are cached (a
// miss is always read), so a session of another tenant, or one that does
// not exist yet, is never answered from here. The two generations make
// eviction O(1) and keep what was used since the last one.
type headers struct {
	mu        sync.Mutex
	cur, prev map[headerKey]store.Session
}

type headerKey struct{ tenant, id string }

func (c *headers) get(tenant, id string) (store.Session, bool) {
	k := headerKey{tenant, id}
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.cur[k]
	if !ok {
		if h, ok = c.prev[k]; ok {
			c.putLocked(k, h)
		}
	}
	return withOwnPersona(h), ok
}

// put caches h as committed: its CreatedAt as the column holds it (UTC,
// microseconds, which is what pgx sends: it truncates).
func (c *headers) put(tenant string, h store.Session) {
	h.CreatedAt = h.CreatedAt.Truncate(time.Microsecond).UTC()
	h = withOwnPersona(h)
	h.Limits = h.Limits.Stored()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(headerKey{tenant, h.ID}, h)
}

func (c *headers) putLocked(k headerKey, h store.Session) {
	if len(c.cur) >= headerCacheSize {
		c.prev, c.cur = c.cur, nil
	}
	if c.cur == nil {
		c.cur = make(map[headerKey]store.Session, headerCacheSize)
	}
	c.cur[k] = h
}

// withOwnPersona returns h with a Persona of its own, so that neither the
// cache nor its callers see the other's changes to it.
func withOwnPersona(h store.Session) store.Session {
	if h.Persona != nil {
		p := *h.Persona
		h.Persona = &p
	}
	h.Limits = h.Limits.Clone()
	return h
}
