package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrFenced: the write was made for a resident agent whose lease the
// writer (Owner of its context) no longer holds — another replica took it
// over (docs/architecture.md §5). Nothing was written.
var ErrFenced = errors.New("lease lost")

type ownerKey struct{}

// WithOwner returns ctx whose writes to a resident agent's session log, and
// settlements of its activations, are conditional on owner holding the
// agent's resident lease (ClaimResident): without the lease they fail with
// ErrFenced. Writes under a context without an owner are unconditional.
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// Owner returns the owner ctx's writes are fenced by, "" when none.
func Owner(ctx context.Context) string {
	o, _ := ctx.Value(ownerKey{}).(string)
	return o
}

// Resident is the lease of one resident agent (a root session or a
// continuable child): the replica that drives it, until when.
type Resident struct {
	// Tenant is filled in when reading across tenants (ExpiredResidents).
	Tenant     string
	SessionID  string
	Owner      string
	LeaseUntil time.Time
}

// Control is a control request for a resident agent or a run another
// replica drives (docs/architecture.md §5): Op with its Payload, for Target (a session
// or run id), to be carried out by Owner, which writes Answer.
type Control struct {
	ID string
	// Tenant is filled in when reading; the context's tenant is used on
	// write.
	Tenant     string
	Target     string
	Op         string
	Payload    json.RawMessage
	Owner      string
	CreatedAt  time.Time
	Answer     json.RawMessage // nil until answered
	AnsweredAt time.Time
}

// ClaimParams is a claim of a resident lease (Residents.ClaimResident).
type ClaimParams struct {
	SessionID string
	Owner     string
	// Now is the claim's time: a lease that ended before it is free.
	Now time.Time
	// Until is when the claimed lease ends unless renewed.
	Until time.Time
}

// Residents is the part of Store that keeps resident leases and carries
// control requests between replicas.
type Residents interface {
	// ClaimResident makes p.Owner the holder of p.SessionID's lease until
	// p.Until, when nobody holds it, p.Owner does already, or the holder's
	// lease ended before p.Now. It returns the lease as it stands
	// afterwards and whether p.Owner holds it.
	ClaimResident(ctx context.Context, p ClaimParams) (Resident, bool, error)
	// GetResident returns sessionID's lease. Returns ErrNotFound when
	// nobody holds one.
	GetResident(ctx context.Context, sessionID string) (Resident, error)
	// ReleaseResident drops sessionID's lease if owner holds it; another
	// owner's lease is left alone.
	ReleaseResident(ctx context.Context, sessionID, owner string) error
	// Driving returns which of sessionIDs (at most 1000) a replica drives
	// through a turn at now: a resident lease live at now, and a log whose
	// newest TurnStartEvent has no TurnEndEvent after it. It is the
	// activity of root sessions, which have no runs rows (docs/architecture.md §5), the
	// same on every replica; a turn a crash left open is not driven once
	// its lease lapsed.
	Driving(ctx context.Context, sessionIDs []string, now time.Time) (map[string]bool, error)
	// ExpiredResidents returns, across tenants, the leases that ended
	// before now, oldest first, at most 1000: agents whose owner is gone.
	ExpiredResidents(ctx context.Context, now time.Time) ([]Resident, error)

	// SendControl stores c, unanswered (a zero CreatedAt is now), and wakes
	// ControlTopic(c.Owner). Returns ErrConflict if the id exists.
	SendControl(ctx context.Context, c Control) error
	// Controls returns, across tenants, the unanswered requests for owner
	// in the order they were sent, at most 1000.
	Controls(ctx context.Context, owner string) ([]Control, error)
	// AnswerControl stores the answer to request id and wakes
	// AnswerTopic(id). Returns ErrNotFound (the requester gave up and
	// deleted it), or ErrConflict if it is answered already.
	AnswerControl(ctx context.Context, id string, answer json.RawMessage) error
	// GetControl returns one request. Returns ErrNotFound.
	GetControl(ctx context.Context, id string) (Control, error)
	// DeleteControl removes request id, answered or not: its requester is
	// done with it. Unknown ids are ignored.
	DeleteControl(ctx context.Context, id string) error
	// SweepControls deletes the requests of every tenant sent before
	// before, answered or not, and returns how many: their requesters died
	// while waiting (a live requester deletes its own), so nobody reads them.
	SweepControls(ctx context.Context, before time.Time) (int64, error)
}

// ControlTopic is the wake-up topic of the control requests for owner.
func ControlTopic(owner string) string { return "control:" + owner }

// AnswerTopic is the wake-up topic of the answer to control request id.
func AnswerTopic(id string) string { return "answer:" + id }
