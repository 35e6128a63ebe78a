package resident

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// Control is where requests cross replicas (docs/architecture.md §5).
// Every resident agent — a root session or a continuable child — is driven
// by the one replica that holds its resident lease (store.ClaimResident),
// renewed with the run leases (internal/subagent's Service.KeepLeases). A
// request for an agent, or a run, another replica drives live is not
// refused: it is written as a control request for the owner, which is
// woken through the store (NOTIFY), carries it out through the same code
// path as a local call, and writes the answer back; the requester answers
// its client with exactly that. When the owner's lease lapses while a
// request waits, the requester claims the agent and acts itself. The kinds
// (internal/children, internal/roots) keep their API and call Forward;
// this file is all the cross-replica plumbing there is.
//
// A process has one Control (internal/subagent's Service.Control). Safe
// for concurrent use.
type Control struct {
	st    store.Store
	owner string
	lease time.Duration
	log   *slog.Logger
	// metrics counts takeovers and the requests carried out here.
	metrics *telemetry.Metrics

	// leases is the process's one registry of resident leases; its
	// durable side is this Control's claim and release.
	leases  *Leases
	codec   Codec
	resumes func(sess store.Session) bool // ControlConfig.Resumes

	mu       sync.Mutex
	handlers map[string]ControlHandler
	// residents are the kinds of resident agents of this process (the
	// continuable children, root sessions): Service.KeepLeases takes over
	// the lapsed ones and Fence stops driving them.
	residents []ResidentKind
	serving   map[string]bool // ids of requests being carried out here
}

// ControlHandler carries out op for target (ctx has the request's tenant)
// and returns its result, to be marshalled as the answer, or its error.
type ControlHandler func(ctx context.Context, target string, payload json.RawMessage) (any, error)

// ResidentKind is one kind of resident agent, as Control sees it
// (Group implements it).
type ResidentKind interface {
	// TakeOver resumes sess, a resident agent whose owner's lease lapsed
	// and which has undelivered messages or work that outlived its owner
	// (ControlConfig.Resumes), if it is of this kind; it reports whether it was.
	// The lease, held by from, passes to the kind.
	TakeOver(ctx context.Context, sess store.Session, from string) (bool, error)
	// Fence stops driving every resident agent of this kind at once: this
	// replica could not renew its leases, which are about to lapse.
	Fence(ctx context.Context)
}

// errOwnerLapsed: the owner a request was sent to stopped renewing its
// lease before answering.
var errOwnerLapsed = errors.New("owner's lease lapsed before it answered")

// controlPoll is the safety net of a requester waiting for its answer (a
// lost wake-up) and of an owner waiting for requests.
const controlPoll = time.Second

// ControlConfig configures a Control.
type ControlConfig struct {
	Store store.Store
	// Owner is this replica's id; Lease how long a claim lasts between
	// renewals.
	Owner string
	Lease time.Duration
	// Codec carries errors across replicas as their clients see them.
	Codec Codec
	// Resumes, when set, reports whether lapsed agent sess is to be taken
	// over although nothing waits in its inbox: its work outlived its
	// owner (a remote agent's turn, internal/subagent's Reattacher).
	Resumes func(sess store.Session) bool
	Logger  *slog.Logger
	Metrics *telemetry.Metrics
}

// Codec carries the error of a control request from the replica that
// carried it out to the one that asked, as the client sees it.
type Codec struct {
	// Encode returns err's wire form, ok false for an internal error
	// (sent as its text, with code WireInternal).
	Encode func(err error) (w WireError, ok bool)
	// Decode returns the error w stands for (never WireInternal).
	Decode func(w WireError) error
	// Abort is the error of a requester that stopped waiting because ctx
	// ended with cause.
	Abort func(cause error, message string) error
}

// WireInternal is the code of an internal error on the wire: its message
// is the error's text, and the requester returns it as a plain error.
const WireInternal = "INTERNAL"

// NewControl returns the Control of this process; Serve carries out the
// requests sent to it.
func NewControl(cfg ControlConfig) *Control {
	c := &Control{st: cfg.Store, owner: cfg.Owner, lease: cfg.Lease, log: cfg.Logger, metrics: cfg.Metrics, codec: cfg.Codec, resumes: cfg.Resumes,
		handlers: map[string]ControlHandler{}, serving: map[string]bool{}}
	c.leases = NewLeases(claimer{c})
	return c
}

// Leases returns the registry of the resident leases this process holds:
// every kind of resident agent holds and releases its leases there.
func (c *Control) Leases() *Leases { return c.leases }

// Handle registers h for requests of op. Call it before Serve.
func (c *Control) Handle(op string, h ControlHandler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handlers[op] = h
}

// AddResidents registers a kind of resident agent for takeover and fencing.
func (c *Control) AddResidents(k ResidentKind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.residents = append(c.residents, k)
}

// Fenced returns ctx whose writes to a resident agent's log are
// conditional on this replica holding its lease (store.WithOwner).
func (c *Control) Fenced(ctx context.Context) context.Context {
	return store.WithOwner(ctx, c.owner)
}

// claimer is the durable side of Control.leases (Claimer).
type claimer struct{ c *Control }

// Claim makes this replica the driver of resident agent id, unless another
// replica holds its lease live: then it returns ErrHeldElsewhere.
func (c claimer) Claim(ctx context.Context, id string) error {
	now := time.Now()
	r, claimed, err := c.c.st.ClaimResident(ctx, store.ClaimParams{SessionID: id, Owner: c.c.owner, Now: now, Until: now.Add(c.c.lease)})
	if err != nil {
		return fmt.Errorf("claim %s: %w", id, err)
	}
	if !claimed {
		return fmt.Errorf("%w: %s holds %s until %v", ErrHeldElsewhere, r.Owner, id, r.LeaseUntil)
	}
	return nil
}

// Release gives up this replica's lease of id. A failure is logged: the
// lease is then renewed with the others, and requests keep coming here.
func (c claimer) Release(ctx context.Context, id string) {
	if err := c.c.st.ReleaseResident(ctx, id, c.c.owner); err != nil {
		c.c.log.WarnContext(ctx, "release resident lease", slog.String("session_id", id), slog.Any("error", err))
	}
}

// holder returns the other replica that holds id's lease live, "" when
// none does (free, lapsed, or this replica's).
func (c *Control) holder(ctx context.Context, id string) (string, error) {
	r, err := c.st.GetResident(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("look up the driver of %s: %w", id, err)
	case r.Owner == c.owner || !r.LeaseUntil.After(time.Now()):
		return "", nil
	}
	return r.Owner, nil
}

// answerJSON is a control request's answer: the result, or the error as a
// client would see it.
type answerJSON struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *WireError      `json:"error,omitempty"`
}

// WireError is an error as a control answer carries it.
type WireError struct {
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// Forward runs op on resident agent target: local when no other replica
// holds target's lease live (local claims it as it starts driving, and may
// return ErrHeldElsewhere when it lost that race), else as a control
// request to the holder, whose answer — result or error (Codec) — it returns as
// local would have. When the holder's lease lapses before it answers, the
// agent is free: Forward runs local.
func Forward[R any](ctx context.Context, c *Control, target, op string, payload any, local func() (R, error)) (R, error) {
	var zero R
	for {
		owner, err := c.holder(ctx, target)
		if err != nil {
			return zero, err
		}
		if owner == "" {
			r, err := local()
			if errors.Is(err, ErrHeldElsewhere) {
				continue
			}
			return r, err
		}
		r, err := send[R](ctx, c, owner, target, op, payload, func(ctx context.Context) (bool, error) {
			holder, err := c.holder(ctx, target)
			return holder == owner, err
		})
		if errors.Is(err, errOwnerLapsed) {
			continue
		}
		return r, err
	}
}

// ForwardRun runs op on run runID of kind one-shot that owner drives: as a
// control request when owner is another replica whose lease on the run is
// live, else local.
func ForwardRun[R any](ctx context.Context, c *Control, run store.Run, op string, payload any, local func() (R, error)) (R, error) {
	if run.State != store.StateRunning || run.Owner == c.owner || !run.LeaseUntil.After(time.Now()) {
		return local()
	}
	r, err := send[R](ctx, c, run.Owner, run.ID, op, payload, func(ctx context.Context) (bool, error) {
		cur, err := c.st.GetRun(ctx, run.ID)
		return cur.State == store.StateRunning && cur.LeaseUntil.After(time.Now()), err
	})
	if errors.Is(err, errOwnerLapsed) {
		return local()
	}
	return r, err
}

// send writes op for target as a control request to owner and waits for
// its answer, woken by the answer's topic with a slow poll as the safety
// net; on each poll alive says whether owner still drives target
// (errOwnerLapsed when not). ctx bounds the wait; the request is deleted
// when send returns.
func send[R any](ctx context.Context, c *Control, owner, target, op string, payload any, alive func(context.Context) (bool, error)) (R, error) {
	var zero R
	raw, err := json.Marshal(payload)
	if err != nil {
		return zero, fmt.Errorf("encode %s request for %s: %w", op, target, err)
	}
	id := uuid.NewString()
	wake, stop := c.st.Subscribe(store.AnswerTopic(id))
	defer stop()
	if err := c.st.SendControl(ctx, store.Control{ID: id, Target: target, Op: op, Payload: raw, Owner: owner}); err != nil {
		return zero, fmt.Errorf("send %s request for %s to %s: %w", op, target, owner, err)
	}
	defer func() {
		if err := c.st.DeleteControl(context.WithoutCancel(ctx), id); err != nil {
			c.log.WarnContext(ctx, "delete answered control request", slog.String("id", id), slog.Any("error", err))
		}
	}()
	tick := time.NewTicker(controlPoll)
	defer tick.Stop()
	gone := false // alive said no at the last poll
	for {
		ctl, err := c.st.GetControl(ctx, id)
		if err != nil {
			return zero, fmt.Errorf("read the answer to %s request for %s: %w", op, target, err)
		}
		if !ctl.AnsweredAt.IsZero() {
			return decodeAnswer[R](c.codec, ctl.Answer, owner)
		}
		select {
		case <-wake:
		case <-tick.C:
			ok, err := alive(ctx)
			if err != nil {
				return zero, err
			}
			// A live owner may let go of target as it carries the request
			// out (a run that settles right after its steer was admitted,
			// or because it was cancelled): its answer follows at once. So
			// the owner counts as lapsed only when alive says no at two
			// polls in a row and no answer came in between.
			if !ok && gone {
				return zero, errOwnerLapsed
			}
			gone = !ok
		case <-ctx.Done():
			return zero, c.codec.Abort(context.Cause(ctx), fmt.Sprintf("stopped waiting for replica %s to carry out the request", owner))
		}
	}
}

// decodeAnswer returns the result or the error an answer carries.
func decodeAnswer[R any](codec Codec, raw json.RawMessage, owner string) (R, error) {
	var zero R
	var a answerJSON
	if err := json.Unmarshal(raw, &a); err != nil {
		return zero, fmt.Errorf("answer of replica %s: %w", owner, err)
	}
	if e := a.Error; e != nil {
		if e.Code == WireInternal {
			return zero, fmt.Errorf("replica %s: %s", owner, e.Message)
		}
		return zero, codec.Decode(*e)
	}
	var r R
	if len(a.Result) > 0 {
		if err := json.Unmarshal(a.Result, &r); err != nil {
			return zero, fmt.Errorf("answer of replica %s: %w", owner, err)
		}
	}
	return r, nil
}

// Serve carries out the control requests sent to this replica until ctx
// ends: on every wake-up of its topic, and every controlPoll, it reads the
// unanswered ones and runs each not yet running, concurrently.
func (c *Control) Serve(ctx context.Context) {
	wake, stop := c.st.Subscribe(store.ControlTopic(c.owner))
	defer stop()
	tick := time.NewTicker(controlPoll)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		list, err := c.st.Controls(ctx, c.owner)
		if err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "read control requests", slog.Any("error", err))
		}
		for _, ctl := range list {
			c.mu.Lock()
			busy := c.serving[ctl.ID]
			c.serving[ctl.ID] = true
			c.mu.Unlock()
			if !busy {
				wg.Go(func() { c.carryOut(ctx, ctl) })
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-tick.C:
		}
	}
}

// carryOut runs one control request and writes its answer.
func (c *Control) carryOut(ctx context.Context, ctl store.Control) {
	defer func() {
		c.mu.Lock()
		delete(c.serving, ctl.ID)
		c.mu.Unlock()
	}()
	ctx = store.WithTenant(ctx, ctl.Tenant)
	c.mu.Lock()
	h := c.handlers[ctl.Op]
	c.mu.Unlock()
	var a answerJSON
	var err error
	if h == nil {
		c.metrics.ControlRequest("other")
		err = fmt.Errorf("no handler for control %q", ctl.Op)
	} else {
		c.metrics.ControlRequest(ctl.Op)
		var res any
		if res, err = h(ctx, ctl.Target, ctl.Payload); err == nil {
			a.Result, err = json.Marshal(res)
		}
	}
	if err != nil {
		if w, ok := c.codec.Encode(err); ok {
			a.Error = &w
		} else {
			c.log.ErrorContext(ctx, "control request failed", slog.String("op", ctl.Op), slog.String("target", ctl.Target), slog.Any("error", err))
			a.Error = &WireError{Code: WireInternal, Message: err.Error()}
		}
	}
	raw, err := json.Marshal(a)
	if err == nil {
		err = c.st.AnswerControl(ctx, ctl.ID, raw)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		c.log.WarnContext(ctx, "answer control request", slog.String("op", ctl.Op), slog.Any("error", err))
	}
}

// TakeOverLapsed claims the resident agents whose owner's lease lapsed before
// now and delivers their undelivered messages (their kinds resume them);
// one with nothing undelivered is only released. The claim makes this
// exactly one replica's job. A lease a loop of this process holds is its
// own, lapsed because renewals failed: it is left to that loop.
func (c *Control) TakeOverLapsed(ctx context.Context, now time.Time) error {
	lapsed, err := c.st.ExpiredResidents(ctx, now)
	if err != nil {
		return fmt.Errorf("list lapsed resident leases: %w", err)
	}
	c.mu.Lock()
	kinds := append([]ResidentKind(nil), c.residents...)
	c.mu.Unlock()
	var errs []error
	for _, r := range lapsed {
		rctx := store.WithTenant(ctx, r.Tenant)
		key := Key{Tenant: r.Tenant, ID: r.SessionID}
		if err := c.leases.Hold(rctx, key, HolderTakeover); err != nil {
			continue // another replica got there first, or a loop here holds it
		}
		c.metrics.Takeover()
		c.log.WarnContext(rctx, "took over a resident agent of a lost owner", slog.String("session_id", r.SessionID), slog.String("owner", r.Owner))
		err := c.resumeLapsed(rctx, r.SessionID, kinds)
		c.leases.Release(rctx, key, HolderTakeover) // unless a kind took it
		if err != nil {
			errs = append(errs, fmt.Errorf("take over %s of %q: %w", r.SessionID, r.Owner, err))
		}
	}
	return errors.Join(errs...)
}

// resumeLapsed hands a claimed lapsed agent with undelivered messages, or
// one whose work outlived its owner (ControlConfig.Resumes), to its kind,
// which drives it under the claim (and releases it when done); any other,
// or one of no kind here, stays with TakeOverLapsed, which releases it.
func (c *Control) resumeLapsed(ctx context.Context, id string, kinds []ResidentKind) error {
	pending, err := c.st.Pending(ctx, id)
	if err != nil {
		return err
	}
	sess, err := c.st.GetSession(ctx, id)
	if err != nil || len(pending) == 0 && (c.resumes == nil || !c.resumes(sess)) {
		return err
	}
	for _, k := range kinds {
		if ok, err := k.TakeOver(ctx, sess, HolderTakeover); ok || err != nil {
			return err
		}
	}
	return nil
}

// Fence stops driving every resident agent of this replica.
func (c *Control) Fence(ctx context.Context) {
	c.mu.Lock()
	kinds := append([]ResidentKind(nil), c.residents...)
	c.mu.Unlock()
	for _, k := range kinds {
		k.Fence(ctx)
	}
}
