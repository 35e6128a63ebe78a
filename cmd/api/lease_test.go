package main

import (
	"strings"
	"testing"
)

func TestRun_RejectsABadLeaseTTL(t *testing.T) {
	for _, v := range []string{"soon", "500ms", "-15s"} {
		logs := newLogLines(t)
		go func() {
			for range logs.lines {
			}
		}()
		err := run(t.Context(), []string{"-lease-ttl", v}, env(nil), logs.w)
		logs.w.Close()
		if err == nil || !strings.Contains(err.Error(), "SUBAGENTD_LEASE_TTL") {
			t.Errorf("-lease-ttl %s: err = %v, want one naming SUBAGENTD_LEASE_TTL", v, err)
		}
	}
}
