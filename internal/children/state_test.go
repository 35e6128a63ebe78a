package children

import (
	"testing"

	"github.com/subagentd/subagentd/internal/resident"
)

// TestActivationState_RefusesWhatTheLifecycleDoesNotAllow: every state
// moves only forward along actNext, and a refused transition changes
// nothing.
func TestActivationState_RefusesWhatTheLifecycleDoesNotAllow(t *testing.T) {
	t.Parallel()
	allowed := map[[2]actState]bool{}
	for from, tos := range actNext {
		for _, to := range tos {
			allowed[[2]actState{from, to}] = true
		}
	}
	for from := actStarting; from <= actSettled; from++ {
		for to := actStarting; to <= actSettled; to++ {
			a := &activation{state: from}
			got := a.to(to)
			want := allowed[[2]actState{from, to}]
			switch {
			case got != want:
				t.Errorf("%s → %s allowed = %v, want %v", from, to, got, want)
			case got && a.state != to, !got && a.state != from:
				t.Errorf("%s → %s (allowed %v) left the state %s", from, to, got, a.state)
			}
			if to <= from && got {
				t.Errorf("%s → %s went backwards", from, to)
			}
		}
	}
	if len(actNext[actSettled]) != 0 {
		t.Errorf("settled moves on to %v", actNext[actSettled])
	}
}

// TestChildState_OwesOnlyWhileLive: a resume can be owed only to a child
// with a live activation, and its settlement reports and clears it.
func TestChildState_OwesOnlyWhileLive(t *testing.T) {
	t.Parallel()
	c := &child{key: resident.Key{Tenant: "t", ID: "c"}}
	if c.owe() {
		t.Fatal("an idle child took an owed resume")
	}
	act := &activation{c: c}
	c.activate(act, actSteering)
	if c.state != childLive || act.state != actSteering {
		t.Fatalf("after activate: child %s, activation %s", c.state, act.state)
	}
	if !c.owe() || c.state != childOwed {
		t.Fatalf("a live child refused an owed resume (state %s)", c.state)
	}
	act.mustTo(actSettling)
	if !c.settled() || c.state != childIdle || c.act != nil || act.state != actSettled {
		t.Fatalf("settled: child %s, act %v, activation %s", c.state, c.act, act.state)
	}
}
