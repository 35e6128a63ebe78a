package http

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// createRun starts a one-shot run and answers 201 once the child is ready.
// With ?wait=true or Prefer: wait=N the answer waits (at most MaxWait) for
// the run to settle and carries the run as it stands then — still 201,
// since the run was created either way (see startRun).
func (s *Server) createRun(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	waitAll := p.bool("wait")
	if err := p.err(); err != nil {
		return err
	}
	var req createRunRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	wait, applied := s.preferWait(r.Header.Get("Prefer"))
	if waitAll {
		wait, applied = s.maxWait, ""
	}
	run, err := s.startRun(r.Context(), req, wait)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/runs/"+run.ID)
	if applied != "" {
		w.Header().Set("Preference-Applied", applied)
	}
	s.writeJSON(w, r, http.StatusCreated, runOut(run))
	return nil
}

// startRun starts the one-shot run req asks for under its parent session
// and returns it once the child is ready, or once it settled when that
// happens within wait (no wait when wait <= 0).
//
// The run is started under the server's context with ctx's tenant, not
// under ctx: it keeps running when the client goes away. With onDisconnect
// "cancel" a client that goes away (ctx ends) before the child is
// published aborts the start, and nothing is published (R21, R22); one
// that goes away later cancels the run, which settles aborted (R23).
func (s *Server) startRun(ctx context.Context, req createRunRequest, wait time.Duration) (store.Run, error) {
	parent, err := s.session(ctx, req.ParentSessionID)
	if err != nil {
		return store.Run{}, err
	}
	cancelOnDisconnect := req.OnDisconnect == onDisconnectCancel
	startCtx, release := s.startContext(ctx, cancelOnDisconnect)
	h, err := s.svc.Start(startCtx, req.Provider, req.seam(parent))
	release()
	if err != nil {
		return store.Run{}, err
	}
	// A disconnect after the provider returned the child is after
	// publication (R24): the run is cancelled, not withdrawn.
	if cancelOnDisconnect && ctx.Err() != nil {
		h.Cancel()
		return store.Run{}, ctx.Err()
	}
	run, err := s.awaitRun(ctx, h.ID(), wait)
	if err != nil && cancelOnDisconnect && ctx.Err() != nil {
		h.Cancel()
	}
	return run, err
}

// startContext returns the context a provider starts the child under: the
// server's, with ctx's tenant, so that the run outlives the request. With
// cancelOnDisconnect the end of ctx also cancels it — the provider then
// rolls the child back (R22). Call release once Start returned: the
// provider holds on to nothing of this context afterwards.
func (s *Server) startContext(ctx context.Context, cancelOnDisconnect bool) (start context.Context, release func()) {
	start = store.WithTenant(s.runCtx, store.Tenant(ctx))
	if !cancelOnDisconnect {
		return start, func() {}
	}
	start, cancel := context.WithCancelCause(start)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	return start, func() {
		stop()
		cancel(nil)
	}
}

// preferWait reads "wait=N" (seconds) from a Prefer header (RFC 7240) and
// returns the wait, bounded by MaxWait, and the Preference-Applied value.
// Preferences it does not understand are ignored, as the RFC asks.
func (s *Server) preferWait(header string) (time.Duration, string) {
	for name, value := range preferences(header) {
		if name != "wait" {
			continue
		}
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			continue
		}
		d := min(time.Duration(n)*time.Second, s.maxWait)
		return d, "wait=" + strconv.Itoa(int(d/time.Second))
	}
	return 0, ""
}

// respondAsync is the Prefer token (RFC 7240 §4.1) that asks for an answer
// before the work is done, and its Preference-Applied value.
const respondAsync = "respond-async"

// preferAsync reports whether a Prefer header asks for respond-async.
func preferAsync(header string) bool {
	for name := range preferences(header) {
		if name == respondAsync {
			return true
		}
	}
	return false
}

// preferences yields the preferences of a Prefer header (RFC 7240), each
// as its lower-cased name and its unquoted value ("" without one);
// parameters after ";" are yielded as preferences of their own, which no
// caller confuses with the ones it reads.
func preferences(header string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, pref := range strings.FieldsFunc(header, func(r rune) bool { return r == ',' || r == ';' }) {
			name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if !yield(strings.ToLower(strings.TrimSpace(name)), strings.Trim(strings.TrimSpace(value), `"`)) {
				return
			}
		}
	}
}

// listRuns pages through runs, oldest first.
func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	out, err := s.runPage(r.Context(), newParams(r))
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// runPage reads the filter of GET /v1/runs from p's query and answers
// that page.
func (s *Server) runPage(ctx context.Context, p *params) (runListJSON, error) {
	f := store.RunFilter{
		ParentID: p.str("parentSessionId", maxIDLength),
		ChildID:  p.str("childSessionId", maxIDLength),
		State:    p.str("state", 16),
	}
	after := p.str("after", maxIDLength)
	limit := p.limit()
	switch f.State {
	case "", store.StateRunning, store.StateSettled, store.StateDisposed:
	default:
		p.fail("state", "must be one of: running, settled, disposed")
	}
	if err := p.err(); err != nil {
		return runListJSON{}, err
	}
	rows, next, err := page(ctx, limit, func(ctx context.Context, after string, n int) ([]store.Run, error) {
		f.AfterID, f.Limit = after, n
		return s.store.ListRuns(ctx, f)
	}, after, func(x store.Run) string { return x.ID })
	if err != nil {
		return runListJSON{}, fmt.Errorf("list runs: %w", err)
	}
	out := runListJSON{Runs: make([]runJSON, 0, len(rows)), NextCursor: next}
	for _, row := range rows {
		out.Runs = append(out.Runs, runOut(row))
	}
	return out, nil
}

// getRun answers one run; ?wait=N long-polls up to N seconds for a running
// run to settle.
func (s *Server) getRun(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("runId")
	wait := time.Duration(p.int("wait", 0, 0, int64(s.maxWait/time.Second))) * time.Second
	if err := p.err(); err != nil {
		return err
	}
	run, err := s.awaitRun(r.Context(), id, wait)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, runOut(run))
	return nil
}

// steerRun steers content into a live run — a one-shot run or a
// continuable child's activation (R96), on whichever replica
// drives it — and answers once a model step admitted it. Steering is
// strict: content that was not admitted is STEER_REJECTED, never queued
// for a later turn or resumed, and a run that is not live is
// STEER_REJECTED too (or RUN_NOT_FOUND).
func (s *Server) steerRun(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("runId")
	if err := p.err(); err != nil {
		return err
	}
	var req steerRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	msgID, err := s.steer(r.Context(), id, req.Content)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, steerResponse{MessageID: msgID})
	return nil
}

// steer steers content into run id: through its handle when it is a live
// one-shot run here, else through the continuation manager, which steers
// a live activation or another replica's live run, else STEER_REJECTED
// naming the run's state.
func (s *Server) steer(ctx context.Context, id string, content []model.Block) (string, error) {
	if h, ok := s.svc.Run(ctx, id); ok {
		return h.Steer(ctx, content)
	}
	if s.conts != nil {
		msgID, err := s.conts.SteerActivation(ctx, id, content)
		if subagent.ErrorCode(err) != subagent.ERunNotFound {
			return msgID, err
		}
	}
	run, err := s.run(ctx, id)
	if err != nil {
		return "", err
	}
	return "", subagent.Errorf(subagent.ESteerRejected, "run %s is %s, not running here", id, run.State)
}

// cancelRun cancels a live run and answers 202 with the run as it stands.
// Cancelling a settled or disposed run changes nothing.
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("runId")
	if err := p.err(); err != nil {
		return err
	}
	if err := s.svc.CancelRun(r.Context(), id); err != nil {
		return err
	}
	run, err := s.run(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusAccepted, runOut(run))
	return nil
}

// disposeRun disposes a run: a live one is cancelled and waited for until
// it settled and released its resources; a settled one is marked disposed.
// Idempotent.
func (s *Server) disposeRun(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("runId")
	if err := p.err(); err != nil {
		return err
	}
	if err := s.svc.DisposeRun(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// run reads one run. Returns RUN_NOT_FOUND.
func (s *Server) run(ctx context.Context, id string) (store.Run, error) {
	if h, ok := s.svc.Run(ctx, id); ok {
		// This process recorded a settled run: no read back. A running
		// one is read, for its pendingApprovals count.
		if row, ok := h.Row(); ok && row.State != store.StateRunning {
			return row, nil
		}
	}
	run, err := s.store.GetRun(ctx, id)
	if err != nil {
		return store.Run{}, runError(id, err)
	}
	return run, nil
}

// runError maps store.ErrNotFound to RUN_NOT_FOUND.
func runError(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &subagent.Error{Code: subagent.ERunNotFound, Message: fmt.Sprintf("no run %q", id), Err: err}
	}
	return fmt.Errorf("read run %s: %w", id, err)
}

// awaitRun returns run id once it is no longer running, or as it stands
// when wait ran out (no wait when wait <= 0) or the server began shutting
// down. It returns ctx's error when ctx ends first.
func (s *Server) awaitRun(ctx context.Context, id string, wait time.Duration) (store.Run, error) {
	if wait <= 0 {
		return s.run(ctx, id)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	return s.untilSettled(ctx, id, timer.C)
}

// untilSettled returns run id once it is no longer running, or as it
// stands when timeout fires (nil: never) or the server began shutting down.
// It returns ctx's error when ctx ends first. A live handle is waited on
// directly; any other run (another replica's) through the lifecycle log's
// wake-ups.
func (s *Server) untilSettled(ctx context.Context, id string, timeout <-chan time.Time) (store.Run, error) {
	if h, ok := s.svc.Run(ctx, id); ok {
		select {
		case <-h.Done():
		case <-timeout:
		case <-s.done:
		case <-ctx.Done():
			return store.Run{}, ctx.Err()
		}
		return s.run(ctx, id)
	}
	wake, stop := s.store.Subscribe(store.LifecycleTopic)
	defer stop()
	for {
		run, err := s.run(ctx, id)
		if err != nil || run.State != store.StateRunning {
			return run, err
		}
		select {
		case <-wake:
		case <-timeout:
			return run, nil
		case <-s.done:
			return run, nil
		case <-ctx.Done():
			return store.Run{}, ctx.Err()
		}
	}
}
