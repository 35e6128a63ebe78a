// Package delegate is model-driven delegation: the model-facing tools of
// docs/seam.md §23 that let any in-process agent — a root session's
// (internal/roots) or a child's — start and steer subagents (Tools). The model route table is built
// by cmd/api, which picks the adapters.
//
// The tools live in the deployment-global agent.Registry, so root agents and
// in-process children see the same set, subject to a child's tool filter;
// children therefore delegate further until the depth cap refuses
// (DefaultMaxDepth).
package delegate
