package web_test

import (
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// TestDashboard_BudgetBarRaisesASpentBudget: the session head of a tree
// with a token budget shows what the tree spent of it; a spent budget
// says the tree is paused and offers to raise it, and the raise
// (PATCH …/limits) is on show at once.
func TestDashboard_BudgetBarRaisesASpentBudget(t *testing.T) {
	t.Parallel()
	srv := startServer(t, replying(nil))
	sd := srv.seeder(t)
	t0 := time.Now().Add(-time.Minute)
	root := sd.root("lead", t0)
	budget := int64(5)
	if err := srv.st.SetSessionLimits(t.Context(), root, store.Limits{TokenBudget: &budget}); err != nil {
		t.Fatal(err)
	}
	kid := sd.child(root, "spawn", "one-shot", "spender", t0.Add(time.Second))
	sd.run(seedRun{child: kid, parent: root, provider: "spawn", start: t0.Add(time.Second), end: t0.Add(2 * time.Second), stop: "completed", output: "done", in: 7, out: 3})

	b := newBrowser(t)
	openDashboard(b, srv.URL+"/#s="+root)
	b.waitFor("the spent budget says the tree is paused",
		`document.querySelector('[data-testid="head-budget"]')?.textContent === ' 10 of 5 tokens — paused'`)
	b.screenshot("paused")
	b.click("raising the budget", `[data-testid="budget-raise"]`)
	b.waitFor("the raised budget is on show",
		`document.querySelector('[data-testid="head-budget"]')?.textContent === ' 10 of 20 tokens' && !document.querySelector('[data-testid="budget-raise"]')`)
	b.screenshot("raised")
	got, err := srv.st.SessionLimits(t.Context(), root)
	if err != nil || got.TokenBudget == nil || *got.TokenBudget != 20 {
		t.Fatalf("the root's limits after the raise: %+v, %v", got, err)
	}
}
