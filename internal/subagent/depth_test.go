package subagent

import (
	"testing"

	"github.com/subagentd/subagentd/internal/store"
)

// depthParent returns a parent with header depth header and runtime depth
// runtime (nil = absent).
func depthParent(header int, runtime *int) Parent {
	return Parent{Session: store.Session{ID: "p", DelegationDepth: header}, Options: AgentOptions{SubagentDepth: runtime}}
}

func TestDepth_R33_EffectiveDepth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		parent  Parent
		want    int
		errCode string
	}{
		{"top level", depthParent(0, nil), 0, ""},
		{"header only", depthParent(2, nil), 2, ""},
		{"runtime only", depthParent(0, ptr(3)), 3, ""},
		{"larger header wins", depthParent(4, ptr(1)), 4, ""},
		{"larger runtime wins", depthParent(1, ptr(4)), 4, ""},
		{"negative runtime", depthParent(0, ptr(-1)), 0, EInvalidMaxDepth},
		{"runtime 2^53", depthParent(0, ptr(MaxSafeInteger+1)), 0, EInvalidMaxDepth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := EffectiveDepth(tt.parent)
			switch {
			case tt.errCode == "" && (err != nil || got != tt.want):
				t.Errorf("EffectiveDepth = %d, %v; want %d", got, err, tt.want)
			case tt.errCode != "" && (ErrorCode(err) != tt.errCode || ErrorMessage(err) != "agent subagentDepth must be a non-negative safe integer"):
				t.Errorf("err = %v, want %s", err, tt.errCode)
			}
		})
	}
}

func TestDepth_R34_ChildDepthAndOverflow(t *testing.T) {
	t.Parallel()
	if got, err := ChildDepth(depthParent(0, nil), nil); err != nil || got != 1 {
		t.Errorf("child of a top-level agent = %d, %v; want 1", got, err)
	}
	if got, err := ChildDepth(depthParent(0, ptr(MaxSafeInteger-1)), nil); err != nil || got != MaxSafeInteger {
		t.Errorf("largest child depth = %d, %v", got, err)
	}
	_, err := ChildDepth(depthParent(0, ptr(MaxSafeInteger)), nil)
	if ErrorCode(err) != EDepthExceeded || ErrorMessage(err) != "subagent child depth exceeds the safe-integer range" {
		t.Errorf("overflow err = %v", err)
	}
}

func TestDepth_R35_MaxDepth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		parent   Parent
		maxDepth int
		msg      string
	}{
		{depthParent(0, nil), 0, "subagent depth 1 exceeds maxDepth 0"},
		{depthParent(2, nil), 2, "subagent depth 3 exceeds maxDepth 2"},
		{depthParent(0, nil), 1, ""},
		{depthParent(2, nil), 3, ""},
	}
	for _, tt := range tests {
		_, err := ChildDepth(tt.parent, ptr(tt.maxDepth))
		switch {
		case tt.msg == "" && err != nil:
			t.Errorf("maxDepth %d: %v", tt.maxDepth, err)
		case tt.msg != "" && (ErrorCode(err) != EDepthExceeded || ErrorMessage(err) != tt.msg):
			t.Errorf("maxDepth %d: err = %v, want %q", tt.maxDepth, err, tt.msg)
		}
	}
	for _, bad := range []int{-1, MaxSafeInteger + 1} {
		_, err := ChildDepth(depthParent(0, nil), ptr(bad))
		if ErrorCode(err) != EInvalidMaxDepth || ErrorMessage(err) != "subagent maxDepth must be a non-negative safe integer" {
			t.Errorf("maxDepth %d: err = %v", bad, err)
		}
	}
}

func TestDepth_R37_MonotoneAcrossResume(t *testing.T) {
	t.Parallel()
	// A resumed agent without runtime depth still counts from its header.
	if _, err := ChildDepth(depthParent(1, nil), ptr(1)); ErrorMessage(err) != "subagent depth 2 exceeds maxDepth 1" {
		t.Errorf("header 1, maxDepth 1: err = %v", err)
	}
	// Runtime options never lower the persisted depth.
	if got, err := ChildDepth(depthParent(2, ptr(1)), nil); err != nil || got != 3 {
		t.Errorf("header 2, runtime 1: child %d, %v; want 3", got, err)
	}
}
