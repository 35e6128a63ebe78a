// Package delegate is model-driven delegation: the agents of root sessions
// (Roots), the model-facing tools of seam-spec §5 that let any in-process
// agent start and steer subagents (Tools), and the model route table built
// from configuration (RoutesFromConfig).
//
// The tools live in the deployment-global agent.Registry, so root agents and
// in-process children see the same set, subject to a child's tool filter;
// children therefore delegate further until the depth cap refuses
// (DefaultMaxDepth).
package delegate
