package main

import (
	"strings"
	"testing"
)

// TestRun_RejectsABadLeaseTTL: a bad lease is refused under the name it
// was given: the flag, or the variable.
func TestRun_RejectsABadLeaseTTL(t *testing.T) {
	for _, v := range []string{"soon", "500ms", "-15s"} {
		for _, viaFlag := range []bool{true, false} {
			logs := newLogLines(t)
			go func() {
				for range logs.lines {
				}
			}()
			args, vars, want := []string{"-lease-ttl", v}, map[string]string(nil), "-lease-ttl: "
			if !viaFlag {
				args, vars, want = nil, map[string]string{"SUBAGENTD_LEASE_TTL": v}, "SUBAGENTD_LEASE_TTL: "
			}
			err := run(t.Context(), args, env(vars), logs.w)
			logs.w.Close()
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("lease %s (flag %v): err = %v, want one starting %q", v, viaFlag, err, want)
			}
		}
	}
}
