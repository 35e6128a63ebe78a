package http

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/subagent"
)

// Defaults of the per-tenant limits (docs/architecture.md §10): far above what one person
// on a laptop, the dashboard or bench/ does, low enough to stop a runaway
// client from starving the other tenants.
const (
	DefaultRateLimit  = 2000  // requests per second per tenant
	DefaultMaxStreams = 10000 // concurrent SSE subscribers per tenant
)

// limitedError is a RATE_LIMITED error that knows when to retry; writeError
// sends it as Retry-After.
type limitedError struct {
	err        error // a RATE_LIMITED *subagent.Error
	retryAfter time.Duration
}

func (e *limitedError) Error() string { return e.err.Error() }
func (e *limitedError) Unwrap() error { return e.err }

// rateLimited returns RATE_LIMITED with a Retry-After of wait (at least 1 s).
func rateLimited(wait time.Duration, format string, args ...any) error {
	return &limitedError{err: subagent.Errorf(subagent.ERateLimited, format, args...), retryAfter: wait}
}

// retryAfter is the Retry-After value, in whole seconds (rounded up, at
// least 1), of a rate-limited error.
func retryAfter(wait time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(wait.Seconds()))))
}

// limiter is a token bucket per key (a tenant): rate tokens a second, up to
// burst. Idle full buckets are forgotten, so the map stays small.
type limiter struct {
	rate  float64 // <= 0: no limit
	burst float64

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds the buckets kept; beyond it, full ones are dropped.
const maxBuckets = 10000

func newLimiter(rate float64) *limiter {
	return &limiter{rate: rate, burst: 2 * rate, buckets: map[string]*bucket{}}
}

// allow takes one token of key's bucket at now; when none is left it
// returns how long until one is.
func (l *limiter) allow(key string, now time.Time) (wait time.Duration, ok bool) {
	if l.rate <= 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}

// prune drops the buckets that have refilled; l.mu is held.
func (l *limiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// counter caps concurrent holders per key (SSE subscribers per tenant).
type counter struct {
	max int // <= 0: no cap

	mu sync.Mutex
	n  map[string]int
}

// acquire takes one of key's slots; release gives it back. Returns
// RATE_LIMITED when all are taken.
func (c *counter) acquire(key, what string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max > 0 && c.n[key] >= c.max {
		return nil, rateLimited(time.Second, "this tenant already has %d open %s, the most allowed", c.max, what)
	}
	c.n[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.n[key]--; c.n[key] == 0 {
				delete(c.n, key)
			}
		})
	}, nil
}
