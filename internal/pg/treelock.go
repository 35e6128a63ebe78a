package pg

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// treeLockClass is the first key of every tree admission lock: the
// two-key form of Postgres advisory locks keeps them apart from
// golang-migrate's one-key lock.
const treeLockClass = 0x7472 // "tr"

// treeLockRetry bounds the pause between two tries of a busy tree lock.
const treeLockRetry = 20 * time.Millisecond

// LockTree takes the admission lock of the tree rooted at root: a
// session-level advisory lock on a pooled connection kept until unlock,
// so every replica's admissions of one tree take turns. It tries without
// waiting in Postgres and pauses between tries, so a caller waiting for a
// busy tree holds no connection (the holder's start needs one to commit).
// Unlock releases the lock, or closes the connection (which releases it
// too) when the release fails; a second call does nothing.
func (s *Store) LockTree(ctx context.Context, root string) (_ func(), err error) {
	defer wrap(&err, "lock tree %q", root)
	key := treeLockKey(store.Tenant(ctx), root)
	pause := time.Millisecond
	for {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		// The try is not cut by ctx: a lock granted to an answer nobody
		// read would stay with the pooled connection. A failed try closes
		// the connection, which releases whatever it held.
		var held bool
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = c.QueryRow(tctx, `SELECT pg_try_advisory_lock($1::int4, $2::int4)`, treeLockClass, key).Scan(&held)
		cancel()
		if err != nil {
			_ = c.Conn().Close(context.Background())
			c.Release()
			return nil, err
		}
		if held {
			var once sync.Once
			return func() {
				once.Do(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if _, err := c.Exec(ctx, `SELECT pg_advisory_unlock($1::int4, $2::int4)`, treeLockClass, key); err != nil {
						_ = c.Conn().Close(ctx)
					}
					c.Release()
				})
			}, nil
		}
		c.Release()
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, treeLockRetry)
	}
}

// treeLockKey is the second key of root's tree lock in tenant: two trees
// whose keys collide only take turns, which costs time, never safety.
func treeLockKey(tenant, root string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(tenant))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(root))
	return int32(h.Sum32())
}
