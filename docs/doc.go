// Package docs holds subagentd's prose documentation (README.md is its
// index; seam.md the subagent seam contract; architecture.md the layout).
// It has no code: its test keeps the code and the pages in step by checking
// that every rule the Go files cite (R12, R45–R51, TestX_R69_Y) has an
// anchor in these pages, that every page section they cite exists, and
// that they cite no document the repository does not hold.
package docs
