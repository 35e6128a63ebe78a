package acp

import (
	"context"
	"errors"
	"sync"

	sdk "github.com/coder/acp-go-sdk"
)

// What an agent can do is learnt from its initialize: session persistence
// (loadSession or sessionCapabilities.resume) makes its children
// continuable. Until an agent of the provider was initialized that is
// unknown, and an unknown capability is never an answer: WaitProbe lets a
// reader (the providers listing, readiness) wait until it is known, or
// until the probe that was to learn it failed.

// caps is what the provider knows of its agent's capabilities, and the
// probes under way to learn them.
type caps struct {
	mu        sync.Mutex
	known     bool // an agent of the provider was initialized
	resumable bool // what its initialize said about session persistence
	probing   int  // probes in flight
	// probed: a probe ended other than by its caller giving up, with
	// probeErr (nil for a success).
	probed   bool
	probeErr error
	changed  chan struct{} // closed and replaced whenever the above change
}

// changedLocked wakes the waiters. c.mu is held.
func (c *caps) changedLocked() {
	if c.changed != nil {
		close(c.changed)
	}
	c.changed = make(chan struct{})
}

// capsState is a snapshot of caps, with a channel closed at its next
// change.
type capsState struct {
	known, probing, probed bool
	probeErr               error
	changed                <-chan struct{}
}

func (c *caps) watch() capsState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	return capsState{known: c.known, probing: c.probing > 0, probed: c.probed, probeErr: c.probeErr, changed: c.changed}
}

// noteCaps records what an agent advertised in initialize.
func (p *Provider) noteCaps(advertised sdk.AgentCapabilities) {
	c := &p.caps
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known, c.resumable = true, resumable(advertised)
	c.changedLocked()
}

// CanResume reports whether the agent advertised session persistence
// (loadSession or sessionCapabilities.resume) in its last initialize; false
// while no agent of this provider was initialized yet (see WaitProbe).
func (p *Provider) CanResume() bool {
	p.caps.mu.Lock()
	defer p.caps.mu.Unlock()
	return p.caps.resumable
}

// Probe starts the agent once in the configured cwd, else the first
// workspace root, only to learn its capabilities from initialize, and
// stops it again. Returns the start's error: EAgentUnavailable, also when
// ctx's deadline passed first, or EAborted when ctx was cancelled.
func (p *Provider) Probe(ctx context.Context) error {
	c := &p.caps
	c.mu.Lock()
	c.probing++
	c.changedLocked()
	c.mu.Unlock()

	err := p.probe(ctx)
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	if err != nil && timedOut {
		err = p.unavailable("it did not finish its capability probe (initialize) in time")
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.probing--
	if err == nil || ctx.Err() == nil || timedOut {
		c.probed, c.probeErr = true, err
	}
	c.changedLocked()
	return err
}

func (p *Provider) probe(ctx context.Context) error {
	if len(p.roots) == 0 {
		return errors.New("probe: no workspace root")
	}
	dir := p.cfg.Cwd
	if dir == "" {
		dir = p.roots[0]
	}
	l, err := p.launch(ctx, dir, ignore{}, p.log)
	if err != nil {
		return err
	}
	return l.release(true, "")
}

// WaitProbe returns once the agent's capabilities are known (nil), or once
// no probe is in flight and the last one failed: then it returns that
// probe's error, the reason the agent cannot be started, and the
// capabilities stay unknown (Capabilities reports Resume false). Before
// the first probe ended, and while one runs, it waits; it returns ctx's
// error when ctx ends first.
func (p *Provider) WaitProbe(ctx context.Context) error {
	for {
		st := p.caps.watch()
		switch {
		case st.known:
			return nil
		case st.probed && !st.probing:
			return st.probeErr
		}
		select {
		case <-st.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// learnCaps makes the capabilities known for a request: it waits for a
// probe in flight, and probes itself when none runs and they are still
// unknown. Returns Probe's errors, and EAborted when ctx ends first.
func (p *Provider) learnCaps(ctx context.Context) error {
	for {
		st := p.caps.watch()
		switch {
		case st.known:
			return nil
		case !st.probing:
			return p.Probe(ctx)
		}
		select {
		case <-st.changed:
		case <-ctx.Done():
			return errAborted()
		}
	}
}
