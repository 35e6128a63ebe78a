package subagent

// MaxSafeInteger is the largest depth the seam accepts (2^53-1, the
// safe-integer range of JSON numbers read as float64, and of JavaScript
// clients).
const MaxSafeInteger = 1<<53 - 1

// validSafeInteger reports whether n is a non-negative safe integer.
func validSafeInteger(n int) bool { return n >= 0 && n <= MaxSafeInteger }

// checkMaxDepth validates a caller's maxDepth cap. Returns EInvalidMaxDepth.
func CheckMaxDepth(maxDepth *int) error {
	if maxDepth != nil && !validSafeInteger(*maxDepth) {
		return Errorf(EInvalidMaxDepth, "subagent maxDepth must be a non-negative safe integer")
	}
	return nil
}

// EffectiveDepth is the delegation depth of an agent (R33): the larger of
// its persisted header depth and its runtime subagentDepth, so that a
// resumed agent never counts lower than it was (R37). Returns
// EInvalidMaxDepth when the runtime depth is not a non-negative safe integer.
func EffectiveDepth(p Parent) (int, error) {
	depth := max(p.Session.DelegationDepth, 0)
	if d := p.Options.SubagentDepth; d != nil {
		if !validSafeInteger(*d) {
			return 0, Errorf(EInvalidMaxDepth, "agent subagentDepth must be a non-negative safe integer")
		}
		depth = max(depth, *d)
	}
	return depth, nil
}

// ChildDepth returns the delegation depth of a child of p (R34: the
// parent's effective depth + 1) and enforces the optional cap (R35). The
// one-shot path runs it in Service.Start; continuable starts run it before
// preparing the child (R38).
//
// Returns EInvalidMaxDepth for an invalid maxDepth or runtime subagentDepth,
// and EDepthExceeded when the child depth leaves the safe-integer range or
// exceeds maxDepth ("subagent depth 1 exceeds maxDepth 0").
func ChildDepth(p Parent, maxDepth *int) (int, error) {
	if err := CheckMaxDepth(maxDepth); err != nil {
		return 0, err
	}
	depth, err := EffectiveDepth(p)
	if err != nil {
		return 0, err
	}
	if depth >= MaxSafeInteger {
		return 0, Errorf(EDepthExceeded, "subagent child depth exceeds the safe-integer range")
	}
	child := depth + 1
	if maxDepth != nil && child > *maxDepth {
		return 0, Errorf(EDepthExceeded, "subagent depth %d exceeds maxDepth %d", child, *maxDepth)
	}
	return child, nil
}

// ChildOptions merges a child's route per R45: the parent's provider, model
// and maxTokens, overridden field-wise by the request's options. Returns
// EInvalidRequest for a maxTokens outside 0..MaxSafeInteger (0 = absent).
// SubagentDepth is left to the caller, which knows the child's depth.
func ChildOptions(parent AgentOptions, req *AgentOptions) (AgentOptions, error) {
	o := AgentOptions{Provider: parent.Provider, Model: parent.Model, MaxTokens: parent.MaxTokens}
	if req == nil {
		return o, nil
	}
	if req.MaxTokens < 0 || req.MaxTokens > MaxSafeInteger {
		const msg = "must be a positive safe integer"
		return o, &Error{Code: EInvalidRequest, Message: "agentOptions.maxTokens " + msg,
			Fields: map[string]string{"agentOptions.maxTokens": msg}}
	}
	if req.Provider != "" {
		o.Provider = req.Provider
	}
	if req.Model != "" {
		o.Model = req.Model
	}
	if req.MaxTokens != 0 {
		o.MaxTokens = req.MaxTokens
	}
	return o, nil
}
