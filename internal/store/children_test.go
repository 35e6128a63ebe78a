package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// pagedSessions serves ListSessions from sessions, Limit at a time after
// AfterID, as a Store pages them.
type pagedSessions struct {
	sessions []Session
	calls    int
	fail     error
}

func (p *pagedSessions) ListSessions(_ context.Context, f SessionFilter) ([]Session, error) {
	p.calls++
	if p.fail != nil {
		return nil, p.fail
	}
	var out []Session
	seen := f.AfterID == ""
	for _, s := range p.sessions {
		if !seen {
			seen = s.ID == f.AfterID
			continue
		}
		if s.ParentID == *f.ParentID && len(out) < f.Limit {
			out = append(out, s)
		}
	}
	return out, nil
}

// TestChildren_ReadsEveryPage: a parent with more children than one page
// holds gets them all, in order, and a failed read is reported.
func TestChildren_ReadsEveryPage(t *testing.T) {
	st := &pagedSessions{}
	for i := range childrenPage + 1 {
		st.sessions = append(st.sessions, Session{ID: fmt.Sprintf("c%05d", i), ParentID: "p"})
	}
	st.sessions = append(st.sessions, Session{ID: "other", ParentID: "q"})
	kids, err := Children(t.Context(), st, "p")
	if err != nil || len(kids) != childrenPage+1 || kids[childrenPage].ID != fmt.Sprintf("c%05d", childrenPage) || st.calls != 2 {
		t.Fatalf("Children = %d sessions, %v after %d reads; want %d, the last c%05d, in 2 reads", len(kids), err, st.calls, childrenPage+1, childrenPage)
	}
	boom := errors.New("boom")
	if _, err := Children(t.Context(), &pagedSessions{fail: boom}, "p"); !errors.Is(err, boom) {
		t.Fatalf("Children of a failing store = %v, want %v", err, boom)
	}
}
