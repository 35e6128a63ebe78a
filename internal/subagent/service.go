package subagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/schema"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// DefaultLeaseDuration is the run lease written when Config.LeaseDuration is
// zero.
const DefaultLeaseDuration = 30 * time.Second

// Config configures a Service.
type Config struct {
	// Store persists runs and the lifecycle log. Required.
	Store store.Store
	// Logger receives listener failures and settlement faults. Required.
	Logger *slog.Logger
	// Owner identifies this replica in run rows (docs/architecture.md §5).
	Owner string
	// LeaseDuration is the lease written with each new run row; the owner's
	// lease renewer extends it. Zero means DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RetainSettled is how long a settled one-shot run keeps its live handle
	// (and its provider's resources, such as an in-process agent) before the
	// service disposes of it itself: a client that never sends DELETE must
	// not make the process grow. The durable run row stays readable. Zero
	// means DefaultRetainSettled.
	RetainSettled time.Duration
	// MaxLiveRuns caps the live runs of one tenant — unsettled one-shot
	// runs and continuable activations together: a start beyond it is
	// ERateLimited. Zero means no cap.
	MaxLiveRuns int
	// Governor admits children into their trees (tree limits, budgets,
	// deadlines); nil admits every child.
	Governor Governor
	// Metrics counts runs (a lifecycle listener the service subscribes),
	// followups, lease takeovers and control requests; nil counts nothing.
	Metrics *telemetry.Metrics
}

// DefaultRetainSettled is the RetainSettled of a zero Config.
const DefaultRetainSettled = 5 * time.Minute

// Service is the subagent seam of one process: the provider registry, the
// lifecycle bus and the one-shot runs this process started. It is safe for
// concurrent use.
type Service struct {
	// logged is the provider set of the durable lifecycle log.
	logged providerLog

	store store.Store
	log   *slog.Logger
	owner string
	lease time.Duration
	// retain is Config.RetainSettled with its default applied.
	retain time.Duration
	// maxLive is Config.MaxLiveRuns.
	maxLive int
	bus     bus
	ctl     *resident.Control
	// acts reaches the activations of continuable children, if any
	// engine drives them (SetActivations): a run this Service does not
	// drive may be one.
	acts Activations

	metrics *telemetry.Metrics
	gov     Governor

	mu        sync.Mutex
	providers []Provider // registration order
	runs      map[string]*RunHandle
	// live counts, per tenant, the live-run slots held (reserveLive): by
	// starts in progress, unsettled one-shot runs and live activations.
	live     map[string]int
	draining bool
}

// NewService returns a Service with no providers.
func NewService(cfg Config) *Service {
	lease := cfg.LeaseDuration
	if lease == 0 {
		lease = DefaultLeaseDuration
	}
	retain := cfg.RetainSettled
	if retain == 0 {
		retain = DefaultRetainSettled
	}
	s := &Service{
		store:   cfg.Store,
		log:     cfg.Logger,
		owner:   cfg.Owner,
		lease:   lease,
		retain:  retain,
		maxLive: cfg.MaxLiveRuns,
		bus:     bus{log: cfg.Logger},
		metrics: cfg.Metrics,
		gov:     cfg.Governor,
		runs:    map[string]*RunHandle{},
		live:    map[string]int{},
	}
	s.ctl = resident.NewControl(resident.ControlConfig{Store: cfg.Store, Owner: cfg.Owner, Lease: lease,
		Codec: controlCodec, Resumes: s.resumesLapsed, Logger: cfg.Logger, Metrics: cfg.Metrics})
	if cfg.Metrics != nil {
		s.bus.subscribe("", countRuns(cfg.Metrics))
	}
	return s
}

// Control returns the Service's cross-replica control (see Control): the
// resident leases and control requests of this replica.
func (s *Service) Control() *resident.Control { return s.ctl }

// Subscribe adds l for the lifecycle events of the runs of parentID, or of
// every event (provider events included) when parentID is "" (R18). It
// returns the func that removes l; calling it more than once is harmless.
func (s *Service) Subscribe(parentID string, l Listener) (unsubscribe func()) {
	return s.bus.subscribe(parentID, l)
}

// Register adds p under p.Name(). The provider is resolvable before
// subagent/provider-added is recorded and dispatched; if recording fails or
// a provider-added listener fails, the registration is rolled back and the
// error returned (R3). The event is recorded only when the durable log does
// not already show the provider as added (a restart with the same providers
// appends nothing); listeners are told either way.
//
// Returns EInvalidRequest for an empty name and EDuplicateProvider when the
// name is taken; the existing registration is left untouched (R1).
func (s *Service) Register(ctx context.Context, p Provider) error {
	name := p.Name()
	if name == "" {
		return Errorf(EInvalidRequest, "provider name must not be empty")
	}
	if _, ok := p.(ContinuableProvider); p.Capabilities().Resume && !ok {
		return Errorf(EInvalidRequest, "provider %q claims resume but cannot create continuable children", name)
	}
	s.mu.Lock()
	if s.lookup(name) >= 0 {
		s.mu.Unlock()
		return Errorf(EDuplicateProvider, "provider %q is already registered", name)
	}
	s.providers = append(s.providers, p)
	s.mu.Unlock()

	added := Event{Type: EventProviderAdded, Provider: name}
	seq, err := s.recordAdded(ctx, added)
	if err != nil {
		s.remove(name)
		return fmt.Errorf("register provider %q: %w", name, err)
	}
	added.Seq = seq
	if err := s.bus.dispatchStrict(ctx, added); err != nil {
		// Listeners before the failing one saw the provider arrive; they
		// and the durable log are told it left again.
		s.remove(name)
		s.announceRemoved(ctx, name)
		return fmt.Errorf("register provider %q: provider-added listener: %w", name, err)
	}
	return nil
}

// Unregister removes the provider named name, then records and dispatches
// subagent/provider-removed with every listener contained (R4). Runs the
// provider already published are not affected (R6). An unknown name is a
// no-op.
func (s *Service) Unregister(ctx context.Context, name string) {
	if s.remove(name) {
		s.announceRemoved(ctx, name)
	}
}

// announceRemoved records and dispatches provider-removed; a failure to
// record is logged, since the removal already happened.
func (s *Service) announceRemoved(ctx context.Context, name string) {
	removed := Event{Type: EventProviderRemoved, Provider: name}
	seq, err := s.recordRemoved(ctx, name)
	if err != nil {
		s.log.ErrorContext(ctx, "record provider-removed", slog.String("provider", name), slog.Any("error", err))
	}
	removed.Seq = seq
	s.bus.dispatch(ctx, removed)
}

// record appends an unscoped lifecycle event to the store.
func (s *Service) record(ctx context.Context, e Event) (store.LifecycleEvent, error) {
	row, err := LifecycleRow(e, time.Now())
	if err != nil {
		return store.LifecycleEvent{}, err
	}
	stored, err := s.store.AppendLifecycle(ctx, row)
	if err != nil {
		return store.LifecycleEvent{}, fmt.Errorf("record %s: %w", e.Type, err)
	}
	return stored, nil
}

// lookup returns the index of name in s.providers or -1. Callers hold s.mu.
func (s *Service) lookup(name string) int {
	return slices.IndexFunc(s.providers, func(p Provider) bool { return p.Name() == name })
}

// remove deletes name from the registry and reports whether it was there.
func (s *Service) remove(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.lookup(name)
	if i < 0 {
		return false
	}
	s.providers = slices.Delete(s.providers, i, i+1)
	return true
}

// Provider returns the provider registered as name; ok is false when there
// is none (not an error, R5).
func (s *Service) Provider(name string) (p Provider, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.lookup(name); i >= 0 {
		return s.providers[i], true
	}
	return nil, false
}

// Providers returns the registered providers in registration order (R2).
func (s *Service) Providers() []Provider {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.providers)
}

// Start validates req in the order of R9, hands the provider the resolved
// request and, once the provider published the child, records the run and
// dispatches subagent/start before returning its handle (R13). A failed
// check never reaches the provider, and a provider that fails publishes
// nothing (R11).
//
// The checks, in order: the provider exists (ENoProvider); it has the
// capability of each present field — outputSchema, maxDepth (depthLimit),
// toolFilter, persona — (EUnsupportedCapability); maxDepth is a
// non-negative safe integer (EInvalidMaxDepth); toolFilter has a list
// (EInvalidRequest); outputSchema lies in the subset and is object-rooted
// (EUnsupportedSchema, violations also in Fields); the one-shot descriptor
// is serializable (EInvalidRequest); the child depth is valid and within
// maxDepth (EInvalidMaxDepth, EDepthExceeded); the tree's limits admit the
// child (Config.Governor: ELimitExceeded, ERateLimited, EBudgetExhausted,
// EDeadlineExceeded, the tree's depth cap); ctx is not done (EAborted);
// the tenant has a free live-run slot (ERateLimited, Config.MaxLiveRuns).
// After Shutdown began it returns EDraining.
//
// ctx is the request's cancellation until publication; its tenant scopes
// every store write of the run, also after ctx ends.
func (s *Service) Start(ctx context.Context, provider string, req Request) (*RunHandle, error) {
	// A one-shot child holds no resident lease: its writes are not fenced,
	// also when a resident agent's tool starts it.
	ctx = store.WithOwner(ctx, "")
	p, resolved, err := s.admit(provider, req)
	if err != nil {
		return nil, err
	}
	limits, admitted, err := s.AdmitTree(ctx, req.Parent, req.Limits)
	if err != nil {
		return nil, err
	}
	defer admitted()
	resolved.Limits = limits
	if err := ctx.Err(); err != nil {
		return nil, &Error{Code: EAborted, Message: "subagent request was aborted before child publication", Err: err}
	}
	release, err := s.ReserveLive(store.Tenant(ctx), false)
	if err != nil {
		return nil, err
	}
	// The child's span is a child of the caller's (a tool call's), whose
	// traceparent the run row keeps; the provider gets ctx with the
	// child's span, so that the agent's own spans are under it.
	tr := RunTrace{Parent: telemetry.Traceparent(ctx)}
	ctx, tr.Inv = telemetry.StartInvoke(ctx, s.InvokeParams(provider, ""))
	h, err := s.start(ctx, p, resolved, release, tr)
	if err != nil {
		tr.Inv.End(StopError, err)
	}
	return h, err
}

// start is Start once admitted, with the run's span in ctx.
func (s *Service) start(ctx context.Context, p Provider, req ResolvedRequest, release func(), tr RunTrace) (*RunHandle, error) {
	if pp, ok := p.(Preparer); ok {
		return s.startPrepared(ctx, pp, req, release, tr)
	}
	run, err := p.Start(ctx, req)
	if err == nil && run == nil {
		err = errors.New("provider returned no run")
	}
	if err != nil {
		release()
		return nil, fmt.Errorf("start %s child: %w", p.Name(), err)
	}
	return s.publish(ctx, p.Name(), req.Parent.Session, run, release, tr)
}

// runTrace is the invoke_agent span of a run or activation and the
// traceparent of its parent span, which the run row keeps.
type RunTrace struct {
	Inv    *telemetry.Invocation
	Parent string
}

// admit runs the checks of Start that precede the provider call and builds
// the resolved request.
func (s *Service) admit(provider string, req Request) (Provider, ResolvedRequest, error) {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		return nil, ResolvedRequest{}, Errorf(EDraining, "the service is shutting down")
	}
	p, ok := s.Provider(provider)
	if !ok {
		return nil, ResolvedRequest{}, Errorf(ENoProvider, "no subagent provider named %q", provider)
	}
	caps := p.Capabilities()
	for _, c := range []struct {
		present, supported bool
		name               string
	}{
		{req.OutputSchema != nil, caps.OutputSchema, "outputSchema"},
		{req.MaxDepth != nil, caps.DepthLimit, "depthLimit (maxDepth)"},
		{req.ToolFilter != nil, caps.ToolFilter, "toolFilter"},
		{req.Persona != nil, caps.Persona, "persona"},
	} {
		if c.present && !c.supported {
			return nil, ResolvedRequest{}, Errorf(EUnsupportedCapability, "provider %q does not support %s", provider, c.name)
		}
	}
	if err := CheckMaxDepth(req.MaxDepth); err != nil {
		return nil, ResolvedRequest{}, err
	}
	if req.ToolFilter != nil {
		if err := checkToolFilter(req.ToolFilter); err != nil {
			return nil, ResolvedRequest{}, err
		}
	}
	if req.OutputSchema != nil {
		if err := checkOutputSchema(req.OutputSchema); err != nil {
			return nil, ResolvedRequest{}, err
		}
	}
	d := Descriptor{Mode: ModeOneShot, Provider: provider, Label: req.Label}
	if _, err := SnapshotDescriptor(d); err != nil {
		return nil, ResolvedRequest{}, err
	}
	depth, err := ChildDepth(req.Parent, req.MaxDepth)
	if err != nil {
		return nil, ResolvedRequest{}, err
	}
	resolved := ResolvedRequest{Request: cloneRequest(req), Descriptor: d, ChildDepth: depth}
	if o := resolved.AgentOptions; o != nil {
		o.SubagentDepth = &depth // a caller's value is overwritten (R45)
	}
	return p, resolved, nil
}

// checkOutputSchema returns EUnsupportedSchema with every violation.
func checkOutputSchema(raw []byte) error {
	vs := schema.Violations(raw)
	if len(vs) == 0 {
		return nil
	}
	texts := make([]string, len(vs))
	fields := map[string]string{}
	for i, v := range vs {
		texts[i] = v.Text
		key := "outputSchema" + strings.TrimPrefix(v.Path, "schema")
		if prev, ok := fields[key]; ok {
			fields[key] = prev + "; " + v.Text
		} else {
			fields[key] = v.Text
		}
	}
	return &Error{Code: EUnsupportedSchema, Message: "unsupported JSON schema: " + strings.Join(texts, "; "), Fields: fields}
}

// cloneRequest copies r so that the provider and the caller share nothing
// mutable (R10: the resolved request is a new object).
func cloneRequest(r Request) Request {
	c := r
	c.Prompt = slices.Clone(r.Prompt)
	c.OutputSchema = slices.Clone(r.OutputSchema)
	c.Parent.Options.SubagentDepth = ClonePtr(r.Parent.Options.SubagentDepth)
	c.Parent.Session.Persona = ClonePtr(r.Parent.Session.Persona)
	c.AgentOptions = ClonePtr(r.AgentOptions)
	if c.AgentOptions != nil {
		c.AgentOptions.SubagentDepth = ClonePtr(c.AgentOptions.SubagentDepth)
	}
	c.MaxDepth = ClonePtr(r.MaxDepth)
	c.Persona = ClonePtr(r.Persona)
	if r.Limits != nil {
		l := *r.Limits
		l.MaxDepth, l.MaxChildren, l.MaxConcurrent, l.TokenBudget = ClonePtr(l.MaxDepth), ClonePtr(l.MaxChildren), ClonePtr(l.MaxConcurrent), ClonePtr(l.TokenBudget)
		c.Limits = &l
	}
	if r.ToolFilter != nil {
		c.ToolFilter = &ToolFilter{Allow: slices.Clone(r.ToolFilter.Allow), Deny: slices.Clone(r.ToolFilter.Deny)}
	}
	return c
}

func ClonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// startPrepared is Start for a Preparer: the provider composes the child,
// and the child's session with the start of its log, the run row and
// subagent/start are one store write, after which the child runs (R13: the
// start edge is recorded with the run, before the run is returned). A
// cancellation before that write stores nothing (R22); one after it
// cancels the published run (R24).
func (s *Service) startPrepared(ctx context.Context, p Preparer, req ResolvedRequest, release func(), tr RunTrace) (*RunHandle, error) {
	child, err := p.Prepare(ctx, req)
	if err != nil {
		release()
		return nil, fmt.Errorf("start %s child: %w", p.Name(), err)
	}
	hdr, evs := child.Session()
	hdr.Limits = req.Limits
	h, err := s.publishWith(ctx, p.Name(), req.Parent.Session, child.Run(), release, tr,
		func(h *RunHandle, r store.Run, start store.LifecycleEvent) (store.LifecycleEvent, error) {
			if err := ctx.Err(); err != nil {
				return start, &Error{Code: EAborted, Message: "subagent request was aborted during child setup", Err: context.Cause(ctx)}
			}
			log, start, err := s.store.StartRunWithSession(h.ctx, store.StartRunParams{Session: hdr, Events: evs, Run: r, Start: start})
			if err == nil {
				child.Launch(log, h.settleWith)
			}
			return start, err
		})
	if err == nil && ctx.Err() != nil {
		h.Cancel() // published: the abort is a cancellation (R24)
	}
	return h, err
}

// publish records a run the provider published, dispatches subagent/start
// and starts the watcher that ends it. When the run cannot be recorded (or
// the service began draining meanwhile) the run is disposed and nothing is
// dispatched.
//
// release gives back the run's live-run slot; the handle calls it when the
// run settles (or is abandoned), before done is closed.
func (s *Service) publish(ctx context.Context, provider string, parent store.Session, run Run, release func(), tr RunTrace) (*RunHandle, error) {
	return s.publishWith(ctx, provider, parent, run, release, tr, func(h *RunHandle, r store.Run, start store.LifecycleEvent) (store.LifecycleEvent, error) {
		return s.store.StartRun(h.ctx, r, start)
	})
}

// publishWith is publish with record as the write of the run row r and
// its start edge for handle h. An *Error from record is returned as it is.
// The handle ends tr's span when the run settles.
func (s *Service) publishWith(ctx context.Context, provider string, parent store.Session, run Run, release func(), tr RunTrace,
	record func(h *RunHandle, r store.Run, start store.LifecycleEvent) (store.LifecycleEvent, error)) (*RunHandle, error) {
	now := storedTime(time.Now())
	h := &RunHandle{
		svc:      s,
		ctx:      context.WithoutCancel(ctx),
		tenant:   store.Tenant(ctx),
		id:       uuid.NewString(),
		provider: provider,
		childID:  run.ChildID(),
		parentID: parent.ID,
		rootID:   store.RootOf(parent),
		local:    run.Local(),
		run:      run,
		done:     make(chan struct{}),
		disposed: make(chan struct{}),
		release:  release,
		inv:      tr.Inv,
	}
	tr.Inv.SetRun(h.id, h.childID)
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		h.abandon()
		return nil, Errorf(EDraining, "the service is shutting down")
	}
	s.runs[h.id] = h
	s.mu.Unlock()

	start := h.event(EventStart)
	h.row = store.Run{
		ID: h.id, Tenant: h.tenant, Kind: store.KindOneShot, Provider: provider, ChildID: h.childID,
		ParentID: parent.ID, RootID: h.rootID, Local: h.local, State: store.StateRunning, StartedAt: now,
		Owner: s.owner, LeaseUntil: now.Add(s.lease), Traceparent: tr.Parent,
	}
	row, err := LifecycleRow(start, now)
	if err == nil {
		row, err = record(h, h.row, row)
	}
	if err != nil {
		s.forget(h)
		h.abandon()
		if e := (*Error)(nil); errors.As(err, &e) {
			return nil, err
		}
		return nil, fmt.Errorf("record start of %s run: %w", provider, err)
	}
	start.Seq = row.ID
	s.bus.dispatch(h.ctx, start)
	go h.watch()
	return h, nil
}

// forget drops h from the live runs.
func (s *Service) forget(h *RunHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.runs, h.id)
}

// Run returns the live handle of a run this process started in ctx's
// tenant and has not disposed. Another tenant's run is reported as absent,
// so a caller can act on the handle (cancel, dispose, steer) without a
// tenant check of its own.
func (s *Service) Run(ctx context.Context, runID string) (*RunHandle, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.runs[runID]
	if !ok || h.tenant != store.Tenant(ctx) {
		return nil, false
	}
	return h, true
}

// reserveLive takes one of tenant's MaxLiveRuns slots — for a one-shot run
// or a continuable activation — until release is called, at the latest
// when that run or activation settles. release is idempotent. Returns
// ERateLimited when every slot is taken, unless force is set: force is for
// an activation that must start to deliver a message already accepted (a
// notice, a recovered inbox row), which counts but is never refused.
func (s *Service) ReserveLive(tenant string, force bool) (release func(), err error) {
	if s.maxLive <= 0 {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force && s.live[tenant] >= s.maxLive {
		return nil, Errorf(ERateLimited, "this tenant already has %d live runs and activations, the most allowed (SUBAGENTD_MAX_LIVE_RUNS)", s.maxLive)
	}
	s.live[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.live[tenant]--; s.live[tenant] == 0 {
				delete(s.live, tenant)
			}
		})
	}, nil
}

// Shutdown stops admitting starts (EDraining), cancels every live run and
// waits until each has settled and dispatched subagent/end, then releases
// the runs' provider resources (child processes). Handles stay valid:
// Dispose still works afterwards. Returns ctx's error when it ends first,
// and the joined release errors.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	live := slices.Collect(maps.Values(s.runs))
	s.mu.Unlock()
	for _, h := range live {
		h.Cancel()
	}
	for _, h := range live {
		select {
		case <-h.Done():
		case <-ctx.Done():
			return fmt.Errorf("shutdown: waiting for runs to settle: %w", ctx.Err())
		}
	}
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, h := range live {
		wg.Go(func() {
			if err := h.run.Dispose(ctx); err != nil {
				errs[i] = fmt.Errorf("release run %s: %w", h.id, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// CancelRun stops live run runID, whichever engine and replica drives it
// (POST /v1/runs/{runId}/cancel): a one-shot run is cancelled; an
// activation's turn is interrupted (Activations.StopRun). A settled
// run is a no-op. Returns ERunNotFound for an unknown run, or for a running
// one nothing here can reach (a Service without Activations).
func (s *Service) CancelRun(ctx context.Context, runID string) error {
	switch h, ok := s.Run(ctx, runID); {
	case ok:
		h.Cancel()
		return nil
	case s.acts != nil:
		return s.acts.StopRun(ctx, runID, false)
	}
	return s.notLive(ctx, runID)
}

// DisposeRun disposes run runID, whichever engine and replica drives it
// (DELETE /v1/runs/{runId}): a live one is stopped and waited for until it
// settled, then it is marked disposed. Idempotent. Returns ERunNotFound as
// CancelRun.
func (s *Service) DisposeRun(ctx context.Context, runID string) error {
	switch h, ok := s.Run(ctx, runID); {
	case ok:
		if err := h.Dispose(ctx); err != nil {
			return fmt.Errorf("dispose run %s: %w", runID, err)
		}
		return nil
	case s.acts != nil:
		return s.acts.StopRun(ctx, runID, true)
	}
	if err := s.notLive(ctx, runID); err != nil {
		return err
	}
	if err := s.store.DisposeRun(ctx, runID); err != nil {
		return fmt.Errorf("dispose run %s: %w", runID, err)
	}
	return nil
}

// notLive returns ERunNotFound unless run runID exists and is not running:
// a running run this process does not drive cannot be reached without
// Activations.
func (s *Service) notLive(ctx context.Context, runID string) error {
	run, err := s.store.GetRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Code: ERunNotFound, Message: fmt.Sprintf("no run %q", runID), Err: err}
	}
	if err != nil {
		return fmt.Errorf("read run %s: %w", runID, err)
	}
	if run.State == store.StateRunning {
		return Errorf(ERunNotFound, "run %s is running but not on this server", runID)
	}
	return nil
}
