// Package subagent is the subagent seam (docs/seam.md): the provider
// registry, the validation order of a one-shot start, runs and their
// exactly-once settlement, the lifecycle event bus, delegation depth,
// descriptors and the output-schema subset, and the vocabulary of
// continuable children (routes, ChildAgent, Materializer), whose engine is
// internal/children. It has no HTTP and no SQL: persistence goes through
// store.Store, transports through Provider.
package subagent
